"""The safe expression language of family and formula files.

Expressions are checked when their file is loaded (syntax whitelist, known
names, whitelisted functions) and evaluated with :mod:`simpleeval`, never with
Python's ``eval``. What is accepted: numbers, strings, ``True``/``False``/
``None``, names, ``+ - * / // % **``, comparisons (including ``in`` and
``is``), ``and``/``or``/``not``, ``a if c else b``, indexing (``xs[i]``) and
calls of the functions in :data:`FUNCTIONS`. Everything else -- attribute
access, assignment, several expressions, the ``^`` operator (XOR in Python, not
power), lambdas, comprehensions, calls outside the whitelist -- is rejected at
load time with ``file:line:col``.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from simpleeval import SimpleEval

from ._errors import EvaluationError, ExpressionError
from ._yamlio import DataFile, json_path

__all__ = ["Expression", "LayerValues", "FUNCTIONS", "compile_expression", "Evaluator"]


class LayerValues(tuple):
    """A per-layer quantity: ``((count, value), ...)`` over the layer classes of a model.

    Only ``layers_sum`` and ``layers_max`` may consume it.
    """

    __slots__ = ()


def _layers_sum(values: LayerValues) -> float:
    return sum(count * value for count, value in values)


def _layers_max(values: LayerValues) -> float:
    return max((value for _, value in values), default=0)


def _at(value, i: int):
    """``value[i]`` for a per-layer list, ``value`` itself for a scalar (Gemma 3n's intermediate_size)."""
    return value[i] if isinstance(value, (list, tuple)) else value


def _lower(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"lower() needs a string, got {text!r}")
    return text.lower()


#: The whitelist of pure functions an expression may call.
FUNCTIONS: dict[str, Callable] = {
    "min": min,
    "max": max,
    "abs": abs,
    "ceil": math.ceil,
    "floor": math.floor,
    "int": int,
    "len": len,
    "lower": _lower,
    "at": _at,
    "layers_sum": _layers_sum,
    "layers_max": _layers_max,
}

_LAYER_REDUCERS = frozenset({"layers_sum", "layers_max"})

_ALLOWED_NODES = (
    ast.Expression, ast.Expr, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp,
    ast.Constant, ast.Name, ast.Load, ast.Call, ast.Subscript,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
    ast.UAdd, ast.USub, ast.Not, ast.And, ast.Or,
    ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Is, ast.IsNot,
)

_FRIENDLY = {
    ast.BitXor: "the `^` operator is bitwise XOR in Python, not power: write `**`",
    ast.BitAnd: "bitwise `&` is not allowed: write `and`",
    ast.BitOr: "bitwise `|` is not allowed: write `or`",
    ast.LShift: "bit shifts are not allowed",
    ast.RShift: "bit shifts are not allowed",
    ast.Invert: "bitwise `~` is not allowed",
    ast.Attribute: "attribute access is not allowed",
    ast.NamedExpr: "assignment is not allowed",
    ast.Lambda: "lambda is not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.List: "list literals are not allowed",
    ast.Tuple: "tuple literals are not allowed",
    ast.Dict: "dict literals are not allowed",
    ast.Set: "set literals are not allowed",
    ast.Slice: "slices are not allowed: index one element",
    ast.JoinedStr: "f-strings are not allowed",
    ast.Starred: "`*` unpacking is not allowed",
}


@dataclass(frozen=True, eq=False)
class Expression:
    """One checked expression, with where it was written."""

    text: str
    names: frozenset
    where: str  # file:line:col
    node: Any = None  # parsed tree; None for a literal
    literal: Any = None

    @property
    def file(self) -> str:
        return self.where.rsplit(":", 2)[0]

    @property
    def line(self) -> int:
        return int(self.where.rsplit(":", 2)[1])

    def evaluate(self, evaluator: "Evaluator", env: Mapping[str, Any]) -> Any:
        if self.node is None:
            return self.literal
        return evaluator.run(self, env)


class Evaluator:
    """A simpleeval instance restricted to :data:`FUNCTIONS`; one per thread of work."""

    __slots__ = ("_s",)

    def __init__(self) -> None:
        self._s = SimpleEval(functions=dict(FUNCTIONS), names={})

    def run(self, expr: Expression, env: Mapping[str, Any]) -> Any:
        s = self._s
        s.names = env
        try:
            return s.eval(expr.text, previously_parsed=expr.node)
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its place
            inputs = ", ".join(f"{n}={env.get(n)!r}" for n in sorted(expr.names) if n in env)
            raise EvaluationError(
                f"{expr.where}: evaluating `{expr.text}` failed: {type(exc).__name__}: {exc}"
                + (f" (inputs: {inputs})" if inputs else "")
            ) from None


def _position(df: DataFile | None, parts: tuple, col_in_text: int, raw: str, text: str) -> str:
    if df is None:
        return f"<expression>:1:{col_in_text + 1}"
    node = df.node_at(parts)
    lead = len(raw) - len(raw.lstrip())
    if getattr(node, "style", None) in (None, "'", '"') and "\n" not in raw:
        quote = 1 if getattr(node, "style", None) in ("'", '"') else 0
        return df.where(parts, column_offset=quote + lead + col_in_text)
    return df.where(parts)


def compile_expression(
    value: Any,
    *,
    allowed: Iterable[str] | Callable[[str], bool],
    df: DataFile | None = None,
    parts: tuple = (),
    layer_valued: frozenset = frozenset(),
    what: str = "expression",
) -> Expression:
    """Check ``value`` (an expression string, or a number/bool literal) and return it compiled.

    ``allowed`` is the set of names the expression may use (or a predicate);
    names in ``layer_valued`` may appear only as the argument of ``layers_sum``
    or ``layers_max``.
    """
    place = df.where(parts) if df else "<expression>:1:1"
    if isinstance(value, bool) or isinstance(value, (int, float)) or value is None:
        return Expression(text=repr(value), names=frozenset(), where=place, literal=value)
    if not isinstance(value, str):
        raise ExpressionError(f"{place}: {json_path(parts)}: {what} must be a string or a number, got {value!r}")
    raw = value
    text = value.strip()

    def fail(message: str, node: ast.AST | None = None) -> ExpressionError:
        col = getattr(node, "col_offset", 0) if node is not None and getattr(node, "lineno", 1) == 1 else 0
        where = _position(df, parts, col, raw, text)
        return ExpressionError(f"{where}: {json_path(parts)}: {message} in `{text}`")

    if not text:
        raise fail(f"empty {what}")
    try:
        module = ast.parse(text, mode="exec")
    except SyntaxError as e:
        col = (e.offset or 1) - 1 if (e.lineno or 1) == 1 else 0
        where = _position(df, parts, col, raw, text)
        raise ExpressionError(f"{where}: {json_path(parts)}: invalid syntax ({e.msg}) in `{text}`") from None
    if len(module.body) != 1:
        raise fail("more than one expression", module.body[1] if len(module.body) > 1 else None)
    stmt = module.body[0]
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        raise fail("assignment is not allowed", stmt)
    if not isinstance(stmt, ast.Expr):
        raise fail(f"only an expression is allowed, not a `{type(stmt).__name__}` statement", stmt)

    is_allowed = allowed if callable(allowed) else frozenset(allowed).__contains__
    names: set[str] = set()
    parents: dict[int, ast.AST] = {}
    for parent in ast.walk(stmt):
        for child in ast.iter_child_nodes(parent):
            parents[id(child)] = parent
    for node in ast.walk(stmt):
        kind = type(node)
        if kind in _FRIENDLY:
            raise fail(_FRIENDLY[kind], node)
        if not isinstance(node, _ALLOWED_NODES):
            raise fail(f"`{kind.__name__}` is not allowed", node)
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                fname = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise fail(f"call of `{fname}` is not allowed (functions: {', '.join(sorted(FUNCTIONS))})", node)
            if node.keywords:
                raise fail("keyword arguments are not allowed", node)
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, str, bool, type(None))):
                raise fail(f"constant {node.value!r} is not allowed", node)
        elif isinstance(node, ast.Name):
            parent = parents.get(id(node))
            if isinstance(parent, ast.Call) and parent.func is node:
                continue  # function name, checked above
            if not is_allowed(node.id):
                raise fail(f"unknown name `{node.id}`", node)
            if node.id in layer_valued and not (
                isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _LAYER_REDUCERS
            ):
                raise fail(f"`{node.id}` has one value per layer: use layers_sum({node.id}) or layers_max({node.id})", node)
            names.add(node.id)
    return Expression(text=text, names=frozenset(names), where=place, node=stmt)
