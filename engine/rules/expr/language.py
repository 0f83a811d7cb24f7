"""The safe expression language of family and formula files, and its compiler.

Expressions are checked when their file is loaded (syntax whitelist, known
names, whitelisted functions) and compiled once to Python code that runs with
no builtins. What is accepted: numbers, strings, ``True``/``False``/``None``,
names, ``+ - * / // % **``, comparisons (including ``in`` and ``is``),
``and``/``or``/``not``, ``a if c else b``, indexing (``xs[i]``) and calls of the
functions in :data:`FUNCTIONS`. Everything else -- attribute access, assignment,
several expressions, the ``^`` operator (XOR in Python, not power), lambdas,
comprehensions, calls outside the whitelist, names starting with ``_`` -- is
rejected at load time with ``file:line:col``.

The checked tree is re-emitted as Python code by :func:`emit`, never passed on
as text the user wrote, so nothing outside the whitelist can reach the compiler.
The run-time limits of a sandboxed evaluator are kept as guarded functions: a
power whose base or exponent exceeds :data:`MAX_POWER`, and a string or sequence
repeated or concatenated beyond :data:`MAX_STRING_LENGTH`, raise instead of
allocating; ``%`` never formats a string. A guard is emitted only where the
operand types (known when a profile is compiled for a model) allow the danger.
"""

from __future__ import annotations

import ast
import atexit
import hashlib
import math
import re
import struct
from dataclasses import dataclass
from functools import cached_property, lru_cache
from types import CodeType
from typing import Any, Callable, Iterable, Mapping

from vramwise.errors import EvaluationError, ExpressionError
from vramwise.rules import diskcache
from vramwise.rules.bounded import BoundedCache
from vramwise.rules.datafiles import DataFile, json_path

__all__ = [
    "Expression", "LayerValues", "FUNCTIONS", "register_function", "compile_expression", "emit", "GLOBALS", "ANY", "type_tag",
    "MAX_POWER", "MAX_STRING_LENGTH", "template_problem", "render", "compile_fragment", "evaluate_fragment",
    "CHECKED_EXPRESSIONS", "CheckedExpressions", "STORED_EXPRESSIONS", "StoredExpressions",
]

#: Largest base or exponent of ``**`` (simpleeval's limit).
MAX_POWER = 4_000_000
#: Longest string or sequence that repetition or concatenation may build (simpleeval's limit).
MAX_STRING_LENGTH = 100_000
#: Limits of one expression as written: characters, nesting depth of its tree, nodes, cases of a table.
MAX_EXPRESSION_LENGTH = 4000
MAX_EXPRESSION_DEPTH = 50
MAX_EXPRESSION_NODES = 1000
MAX_CASES = 64
#: Most bits an integer power may have (larger ones would take unbounded time and memory).
MAX_POWER_BITS = 4096


class LayerValues(tuple):
    """A per-layer quantity: ``((count, value), ...)`` over the layer classes of a model.

    Only ``layers_sum``, ``layers_max`` and ``layers_min`` may consume it.
    """

    __slots__ = ()


def _layers_sum(values: LayerValues) -> float:
    return sum(count * value for count, value in values)


def _layers_max(values: LayerValues) -> float:
    return max((value for _, value in values), default=0)


def _layers_min(values: LayerValues) -> float:
    return min((value for _, value in values), default=0)


def _at(value, i: int):
    """``value[i]`` for a per-layer list, ``value`` itself for a scalar (Gemma 3n's intermediate_size)."""
    return value[i] if isinstance(value, (list, tuple)) else value


def _count_at_least(values, start) -> int:
    """How many of ``values`` (a layer class's ``layer_indices``) are ``start`` or more: the class's layers from
    layer ``start`` on."""
    return sum(1 for v in values if v >= start)


def _float32(value) -> float:
    """``value`` rounded to IEEE 754 single precision (C's ``float``), for a rule a program computes in float32: a
    sum, product or quotient of float32 values rounded again is what float32 arithmetic gives (binary64 holds more
    than twice the bits)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"float32() needs a number, got {value!r}")
    return struct.unpack("<f", struct.pack("<f", value))[0]


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
    "float32": _float32,
    "count_at_least": _count_at_least,
    "layers_sum": _layers_sum,
    "layers_max": _layers_max,
    "layers_min": _layers_min,
}

_LAYER_REDUCERS = frozenset({"layers_sum", "layers_max", "layers_min"})


def _pow(a, b):
    if abs(a) > MAX_POWER or abs(b) > MAX_POWER:
        raise OverflowError(f"{a!r} ** {b!r} is beyond the allowed power ({MAX_POWER})")
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1 and b * abs(a).bit_length() > MAX_POWER_BITS:
        raise OverflowError(f"{a!r} ** {b!r} would have more than {MAX_POWER_BITS} bits")
    return a**b


def _mul(a, b):
    if hasattr(a, "__len__") and b * len(a) > MAX_STRING_LENGTH:
        raise OverflowError(f"repeating a sequence beyond {MAX_STRING_LENGTH} elements")
    if hasattr(b, "__len__") and a * len(b) > MAX_STRING_LENGTH:
        raise OverflowError(f"repeating a sequence beyond {MAX_STRING_LENGTH} elements")
    return a * b


def _add(a, b):
    if hasattr(a, "__len__") and hasattr(b, "__len__") and len(a) + len(b) > MAX_STRING_LENGTH:
        raise OverflowError(f"joining sequences beyond {MAX_STRING_LENGTH} elements")
    return a + b


def _mod(a, b):
    if isinstance(a, str):
        raise TypeError("% does not format strings here")
    return a % b


def compile_fragment(node: ast.AST, where: str = "<fragment>") -> CodeType:
    """Code evaluating ``node``, a sub-tree of a checked expression (emitted by :func:`emit`, with every guard)."""
    return compile(emit(node)[0], where, "eval")


def evaluate_fragment(code: CodeType, env: Mapping[str, Any]) -> Any:
    """The value of code from :func:`compile_fragment` over ``env`` (no builtins; failures are the caller's)."""
    return eval(code, GLOBALS, env)  # noqa: S307 - emitted from a checked tree, no builtins


def round_bytes(value: float) -> int:
    """Nearest whole byte, halves rounded up (components are reported as ints)."""
    return int(value + 0.5) if value >= 0 else -int(-value + 0.5)


#: Globals of every compiled expression: the whitelisted functions and guards, no builtins.
GLOBALS: dict[str, Any] = {"__builtins__": {}}
GLOBALS.update({f"_vw_{name}": fn for name, fn in FUNCTIONS.items()})
GLOBALS.update(_vw_pow=_pow, _vw_mul=_mul, _vw_add=_add, _vw_mod=_mod, _vw_round=round_bytes, _vw_float=float)


def register_function(name: str, fn: Callable) -> None:
    """Adds a pure function of a higher layer to :data:`FUNCTIONS`, under ``name``, for the expressions
    compiled after it (vramwise.profiles registers ``torchao_nf4_setup_reserved``, a replay through the
    caching allocator's model, when it is first imported). A name is given once: registering another
    function under a name already taken is refused."""
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"{name!r} is not a function name an expression may call")
    if FUNCTIONS.get(name, fn) is not fn:
        raise ValueError(f"the expression language already has a function {name!r}")
    FUNCTIONS[name] = fn
    GLOBALS[f"_vw_{name}"] = fn

# -- types, for deciding where guards are needed -------------------------------------------
_NUM, _STR, _SEQ, _NONE, _OTHER = "n", "s", "q", "z", "o"
NUMBER = frozenset(_NUM)
ANY = frozenset((_NUM, _STR, _SEQ, _NONE, _OTHER))
_SIZED = frozenset((_STR, _SEQ, _OTHER))


def type_tag(value: Any) -> frozenset:
    """The type class of a value as the compiler sees it."""
    if isinstance(value, (bool, int, float)):
        return NUMBER
    if isinstance(value, str):
        return frozenset(_STR)
    if isinstance(value, (list, tuple)):
        return frozenset(_SEQ)
    if value is None:
        return frozenset(_NONE)
    return frozenset(_OTHER)


_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
           ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}


def _literal(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"_vw_float({str(value)!r})"
    return repr(value)


def emit(
    node: ast.AST,
    name: Callable[[str], str] = str,
    types: Callable[[str], frozenset] | None = None,
    reducer: Callable[[str, str], str | None] | None = None,
) -> tuple[str, frozenset]:
    """Python code of a checked expression tree, and the type classes its value may have.

    ``name`` maps a variable of the expression to the code that reads it; ``types`` gives
    the type classes of a variable (unknown: any type), from which the guards are chosen;
    ``reducer(function, variable)`` may give the text of ``layers_sum(variable)`` /
    ``layers_max(variable)`` or ``layers_min(variable)`` (None: the plain call). Everything is parenthesised, so operator
    precedence is that of the tree.
    """

    def go(n: ast.AST) -> tuple[str, frozenset]:
        if isinstance(n, ast.Expr):
            return go(n.value)
        if isinstance(n, ast.Constant):
            return _literal(n.value), type_tag(n.value)
        if isinstance(n, ast.Name):
            return name(n.id), (types(n.id) if types is not None else ANY)
        if isinstance(n, ast.BinOp):
            (a, ta), (b, tb) = go(n.left), go(n.right)
            op = type(n.op)
            # arithmetic on anything but strings and sequences gives a number, when it does not raise
            result = ANY if (ta & _SIZED or tb & _SIZED) else NUMBER
            if op is ast.Pow:
                return f"_vw_pow({a}, {b})", result
            if op is ast.Mult and (ta & _SIZED or tb & _SIZED):
                return f"_vw_mul({a}, {b})", result
            if op is ast.Add and ta & _SIZED and tb & _SIZED:
                return f"_vw_add({a}, {b})", result
            if op is ast.Mod and _STR in ta:
                return f"_vw_mod({a}, {b})", result
            return f"({a} {_BINOPS[op]} {b})", result
        if isinstance(n, ast.UnaryOp):
            a, ta = go(n.operand)
            if isinstance(n.op, ast.Not):
                return f"(not {a})", NUMBER
            sign = "-" if isinstance(n.op, ast.USub) else "+"
            return f"({sign}{a})", ANY if ta & _SIZED else NUMBER
        if isinstance(n, ast.BoolOp):
            parts = [go(v) for v in n.values]
            joiner = " and " if isinstance(n.op, ast.And) else " or "
            return "(" + joiner.join(p for p, _ in parts) + ")", frozenset().union(*(t for _, t in parts))
        if isinstance(n, ast.Compare):
            out = [go(n.left)[0]]
            for op, comp in zip(n.ops, n.comparators):
                out += [_CMPOPS[type(op)], go(comp)[0]]
            return "(" + " ".join(out) + ")", NUMBER
        if isinstance(n, ast.IfExp):
            (t, _), (a, ta), (b, tb) = go(n.test), go(n.body), go(n.orelse)
            return f"({a} if {t} else {b})", ta | tb
        if isinstance(n, ast.Subscript):
            return f"{go(n.value)[0]}[{go(n.slice)[0]}]", ANY
        if isinstance(n, ast.Call):
            fname = n.func.id
            if reducer is not None and fname in _LAYER_REDUCERS and len(n.args) == 1 and isinstance(n.args[0], ast.Name):
                text = reducer(fname, n.args[0].id)
                if text is not None:
                    return text, NUMBER
            args = [go(a) for a in n.args]
            text = f"_vw_{fname}(" + ", ".join(a for a, _ in args) + ")"
            if fname in ("ceil", "floor", "int", "len", "count_at_least", "float32", *_LAYER_REDUCERS):
                return text, NUMBER
            if fname == "lower":
                return text, frozenset(_STR)
            if fname in ("min", "max") and len(args) > 1:
                return text, frozenset().union(*(t for _, t in args))
            if fname == "abs" and args and args[0][1] <= NUMBER:
                return text, NUMBER
            return text, ANY
        raise AssertionError(f"unchecked node {type(n).__name__}")  # compile_expression rejects it first

    return go(node)


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
    """One checked expression, with where it was written, compiled for evaluation over a mapping."""

    text: str
    names: frozenset
    where: str  # file:line:col
    node: Any = None  # checked tree; None for a literal
    literal: Any = None
    code: Any = None  # code object evaluating the tree with the expression's names read from a mapping

    @property
    def file(self) -> str:
        return self.where.rsplit(":", 2)[0]

    @property
    def line(self) -> int:
        return int(self.where.rsplit(":", 2)[1])

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """The value over ``env``; any failure becomes an :class:`EvaluationError` naming the place and inputs."""
        if self.code is None:  # a literal (it has neither tree nor code)
            return self.literal
        try:
            return eval(self.code, GLOBALS, env)  # noqa: S307 - code emitted from a checked tree, no builtins
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its place
            raise self.failure(exc, env) from None

    def names_read(self, env: Mapping[str, Any]) -> frozenset:
        """The names evaluating this expression over ``env`` reads: of each ``a if c else b``, the names
        of ``c`` and of the branch ``c`` takes over ``env`` (of both branches when ``c`` cannot be
        evaluated over ``env``). Each condition runs as compiled code, with the guards of any expression."""
        if self.code is None:
            return frozenset()
        conditions = self._conditions
        if not conditions:
            return self.names
        names: set[str] = set()
        stack = [self.node]
        while stack:
            n = stack.pop()
            if isinstance(n, ast.IfExp):
                stack.append(n.test)
                try:
                    taken = evaluate_fragment(conditions[id(n)], env)
                except Exception:  # noqa: BLE001 - a condition that cannot be decided: either branch may be read
                    stack += [n.body, n.orelse]
                    continue
                stack.append(n.body if taken else n.orelse)
                continue
            if isinstance(n, ast.Call):
                stack.extend(n.args)  # the function's name is not a name the expression reads
                continue
            if isinstance(n, ast.Name):
                names.add(n.id)
            stack.extend(ast.iter_child_nodes(n))
        return frozenset(names)

    @cached_property
    def _conditions(self) -> dict:
        """The compiled condition of each ``a if c else b`` of the tree, by the id of its node."""
        return {id(n): compile_fragment(n.test, self.where) for n in ast.walk(self.node) if isinstance(n, ast.IfExp)}

    def failure(self, exc: BaseException, env: Mapping[str, Any]) -> EvaluationError:
        if isinstance(exc, NameError):
            missing = str(exc).split("'")[1] if "'" in str(exc) else str(exc)
            exc = NameError(f"'{missing}' is not defined")
        inputs = ", ".join(f"{n}={env.get(n)!r}" for n in sorted(self.names) if n in env)
        return EvaluationError(
            f"{self.where}: evaluating `{self.text}` failed: {type(exc).__name__}: {exc}"
            + (f" (inputs: {inputs})" if inputs else "")
        )


class _Reparsed(Expression):
    """An expression whose checks passed in an earlier process (:data:`STORED_EXPRESSIONS`): its code is the stored
    one, and its checked tree, which only some uses read, is parsed again from its text when first asked for
    (the checked tree is the parsed tree, never modified)."""

    @cached_property
    def node(self) -> ast.AST:  # type: ignore[override]
        return ast.parse(self.text, mode="exec").body[0]


def _reparsed(text: str, names: frozenset, where: str, code: CodeType) -> Expression:
    e = object.__new__(_Reparsed)  # not through __init__, which would set ``node`` over the cached property
    e.__dict__.update(text=text, names=names, where=where, literal=None, code=code)
    return e


def _position(df: DataFile | None, parts: tuple, col_in_text: int, raw: str, text: str) -> str:
    if df is None:
        return f"<expression>:1:{col_in_text + 1}"
    node = df.node_at(parts)
    lead = len(raw) - len(raw.lstrip())
    if getattr(node, "style", None) in (None, "'", '"') and "\n" not in raw:
        quote = 1 if getattr(node, "style", None) in ("'", '"') else 0
        return df.where(parts, column_offset=quote + lead + col_in_text)
    return df.where(parts)


class CheckedExpressions(BoundedCache):
    """Expressions that passed :func:`compile_expression`'s checks, by (text, allowed names, names with one value
    per layer): their names, checked tree and code, so that the same expression under the same names is not
    parsed, checked and compiled again (registries over the same or copied data files compile the same
    expressions). Bounded; :meth:`clear` forgets every entry. Trees are shared between the expressions made from
    an entry and are never modified."""

    __slots__ = ()


#: The checked expressions of this process (:meth:`CheckedExpressions.clear` forgets them).
CHECKED_EXPRESSIONS = CheckedExpressions(1 << 16)


class StoredExpressions:
    """The checked expressions kept between processes, in the cache on disk (:mod:`vramwise.rules.diskcache`):
    each one's names and code by a digest of its text, allowed names and per-layer names, in one entry per data
    file the expressions were read from (its shown path; ``""`` for none), keyed by that path and this module's
    source (the checks and the code emitted are this module's). A file's entry is read on its first lookup, so a
    process reads the entries of the files it compiles and no others; what this process checked is added at its
    exit. A hit is not checked, emitted or compiled; its tree is parsed again only where it is read
    (:class:`_Reparsed`). Bounded: at most ``size`` expressions a file, the oldest go."""

    def __init__(self, size: int):
        self._size = size
        self._shards: dict = {}  # file -> {digest: (names, code)}
        self._root: str | None = None
        self._added: set = set()  # files whose entry this process added to
        self._registered = False
        self._allowed: dict = {}

    def _digest(self, key: tuple) -> bytes:
        text, allowed, layer_valued = key
        names = self._allowed.get(allowed)
        if names is None:
            names = self._allowed[allowed] = "\0".join(sorted(allowed)).encode()
        per_layer = "\0".join(sorted(layer_valued)).encode() if layer_valued else b""
        raw = text.encode("utf-8", "surrogatepass")  # length first: no text can run into the names
        return hashlib.blake2b(b"%d\1%s\1%s\1%s" % (len(raw), raw, names, per_layer), digest_size=16).digest()

    def _entries(self, root: str, shard: str) -> dict:
        if root != self._root:  # first use, or the cache was moved
            self.save()
            self._shards, self._root = {}, root
        data = self._shards.get(shard)
        if data is None:
            stored = diskcache.get("expressions", _shard_key(shard))
            data = self._shards[shard] = stored if type(stored) is dict else {}
        return data

    def get(self, key: tuple, shard: str = ""):
        """(names, None, code) of ``key`` stored by an earlier process, or None (the tree is parsed when needed)."""
        root = diskcache.cache_dir()
        if root is None:
            return None
        entry = self._entries(root, shard).get(self._digest(key))
        if type(entry) is not tuple or len(entry) != 2 or type(entry[1]) is not CodeType or type(entry[0]) is not tuple:
            return None
        hit = (frozenset(entry[0]), None, entry[1])  # no tree: parsed when an expression made from it asks
        CHECKED_EXPRESSIONS.put(key, hit)
        return hit

    def add(self, key: tuple, names, code: CodeType, shard: str = "") -> None:
        root = diskcache.cache_dir()
        if root is None:
            return
        data = self._entries(root, shard)
        digest = self._digest(key)
        if digest in data:
            return
        if len(data) >= self._size:
            del data[next(iter(data))]
        data[digest] = (tuple(sorted(names)), code)
        if not self._registered:
            atexit.register(self.save)
            self._registered = True
        self._added.add(shard)

    def save(self) -> None:
        """Write the entries this process added to, to the folder it read (nothing when it added nothing)."""
        if self._added and self._root is not None:
            for shard in sorted(self._added):
                if shard in self._shards:
                    diskcache.put("expressions", _shard_key(shard), self._shards[shard], root=self._root)
        self._added = set()

    def clear(self) -> None:
        """Forget the entries read and any not yet written (the next lookup reads the cache again)."""
        self._shards, self._root, self._added = {}, None, set()
        self._allowed.clear()


def _shard_key(shard: str) -> bytes:
    return _source_key() + b"\0" + shard.encode("utf-8", "surrogatepass")


@lru_cache(maxsize=1)
def _source_key() -> bytes:
    """This module's source: the checks and the emitted code of a stored expression are this module's."""
    return diskcache.source_digest(__file__)


#: The checked expressions kept between processes.
STORED_EXPRESSIONS = StoredExpressions(1 << 12)  # per data file: a family's or a profile's few hundred at most


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
    names in ``layer_valued`` may appear only as the argument of ``layers_sum``,
    ``layers_max`` or ``layers_min``.
    """
    place = df.where(parts) if df else "<expression>:1:1"
    if isinstance(value, bool) or isinstance(value, (int, float)) or value is None:
        return Expression(text=repr(value), names=frozenset(), where=place, literal=value)
    if isinstance(value, Mapping):
        return _compile_cases(value, allowed=allowed, df=df, parts=parts, layer_valued=layer_valued, what=what)
    if not isinstance(value, str):
        raise ExpressionError(f"{place}: {json_path(parts)}: {what} must be a string or a number, got {value!r}")
    raw = value
    text = value.strip()

    shown = text if len(text) <= 200 else text[:200] + "..."

    def fail(message: str, node: ast.AST | None = None) -> ExpressionError:
        col = getattr(node, "col_offset", 0) if node is not None and getattr(node, "lineno", 1) == 1 else 0
        where = _position(df, parts, col, raw, text)
        return ExpressionError(f"{where}: {json_path(parts)}: {message} in `{shown}`")

    if not text:
        raise fail(f"empty {what}")
    key = None if callable(allowed) else (text, frozenset(allowed), layer_valued)
    if key is not None:
        hit = CHECKED_EXPRESSIONS.get(key)
        if hit is None:
            hit = STORED_EXPRESSIONS.get(key, df.path if df is not None else "")
        if hit is not None:
            names_seen, stmt, code = hit  # the code, under this expression's file name (no compiling)
            code = code if code.co_filename == place else code.replace(co_filename=place)
            if stmt is None:  # stored by an earlier process: the tree is parsed when asked for
                return _reparsed(text, names_seen, place, code)
            return Expression(text=text, names=names_seen, where=place, node=stmt, code=code)
    if len(text) > MAX_EXPRESSION_LENGTH:
        where = _position(df, parts, 0, raw, text)
        raise ExpressionError(f"{where}: {json_path(parts)}: {what} of {len(text):,} characters; at most "
                              f"{MAX_EXPRESSION_LENGTH:,} are allowed")
    try:
        module = ast.parse(text, mode="exec")
    except SyntaxError as e:
        col = (e.offset or 1) - 1 if (e.lineno or 1) == 1 else 0
        where = _position(df, parts, col, raw, text)
        raise ExpressionError(f"{where}: {json_path(parts)}: invalid syntax ({e.msg}) in `{shown}`") from None
    except (RecursionError, MemoryError, ValueError):
        raise fail(f"{what} nested too deeply to parse") from None
    depth, nodes, stack = 0, 0, [(module, 1)]
    while stack:  # iteratively, before anything recurses over the tree
        node, d = stack.pop()
        depth, nodes = max(depth, d), nodes + 1
        if depth > MAX_EXPRESSION_DEPTH or nodes > MAX_EXPRESSION_NODES:
            raise fail(f"{what} nested more than {MAX_EXPRESSION_DEPTH} deep or larger than {MAX_EXPRESSION_NODES} nodes")
        stack.extend((c, d + 1) for c in ast.iter_child_nodes(node))
    if len(module.body) != 1:
        raise fail("more than one expression", module.body[1] if len(module.body) > 1 else None)
    stmt = module.body[0]
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        raise fail("assignment is not allowed", stmt)
    if not isinstance(stmt, ast.Expr):
        raise fail(f"only an expression is allowed, not a `{type(stmt).__name__}` statement", stmt)

    is_allowed = allowed if key is None else key[1].__contains__
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
            if isinstance(node.value, str) and len(node.value) > MAX_STRING_LENGTH:
                raise fail(f"a string literal longer than {MAX_STRING_LENGTH} characters is not allowed", node)
        elif isinstance(node, ast.Name):
            parent = parents.get(id(node))
            if isinstance(parent, ast.Call) and parent.func is node:
                continue  # function name, checked above
            if node.id.startswith("_"):
                raise fail(f"names starting with `_` are reserved (`{node.id}`)", node)
            if not is_allowed(node.id):
                raise fail(f"unknown name `{node.id}`", node)
            if node.id in layer_valued and not (
                isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _LAYER_REDUCERS
            ):
                raise fail(f"`{node.id}` has one value per layer: use layers_sum({node.id}), layers_max({node.id}) or layers_min({node.id})", node)
            names.add(node.id)
    emitted, _ = emit(stmt)
    code = compile(emitted, place, "eval")
    if key is not None:
        CHECKED_EXPRESSIONS.put(key, (frozenset(names), stmt, code))
        STORED_EXPRESSIONS.add(key, names, code, df.path if df is not None else "")
    return Expression(text=text, names=frozenset(names), where=place, node=stmt, code=code)


def _compile_cases(value: Mapping, *, allowed, df, parts: tuple, layer_valued: frozenset, what: str) -> Expression:
    """``{cases: [{when: c1, then: v1}, ...], else: v}``: the first case whose condition holds gives
    the value, else ``else`` -- the conditional ``v1 if c1 else (v2 if c2 else ... v)`` written as a table."""
    place = df.where(parts) if df else "<expression>:1:1"
    cases = value.get("cases")
    if set(value) != {"cases", "else"} or not isinstance(cases, list) or not cases or len(cases) > MAX_CASES:
        raise ExpressionError(
            f"{place}: {json_path(parts)}: a table of cases has exactly `cases` (a list of 1 to {MAX_CASES} "
            f"when/then pairs) and `else`, got keys {sorted(map(str, value))}"
        )

    def sub(v, where: tuple, kind: str) -> Expression:
        return compile_expression(v, allowed=allowed, df=df, parts=parts + where, layer_valued=layer_valued, what=kind)

    def tree(e: Expression) -> ast.AST:
        return e.node.value if e.node is not None else ast.Constant(e.literal)

    branches = []
    for k, case in enumerate(cases):
        if not isinstance(case, Mapping) or set(case) != {"when", "then"}:
            raise ExpressionError(f"{place}: {json_path(parts + ('cases', k))}: a case has exactly `when` and `then`")
        branches.append((sub(case["when"], ("cases", k, "when"), "condition"), sub(case["then"], ("cases", k, "then"), what)))
    otherwise = sub(value["else"], ("else",), what)
    node = tree(otherwise)
    names = set(otherwise.names)
    for when, then in reversed(branches):
        node = ast.IfExp(test=tree(when), body=tree(then), orelse=node)
        names |= when.names | then.names
    stmt = ast.Expr(value=node)
    ast.fix_missing_locations(stmt)
    emitted, _ = emit(stmt)
    return Expression(text=ast.unparse(stmt), names=frozenset(names), where=place, node=stmt,
                      code=compile(emitted, place, "eval"))


_FIELD = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


def template_problem(text: str, allowed) -> str | None:
    """Why a message template is refused, or None. Placeholders are ``{name}`` with a name from
    ``allowed``; no attribute, index or format spec, and no brace outside a placeholder."""
    if not isinstance(text, str):
        return "a message must be text"
    if len(text) > 1000:
        return "a message of more than 1,000 characters"
    for name in _FIELD.findall(text):
        if name not in allowed:
            return f"unknown placeholder {{{name}}} (placeholders: {', '.join(sorted(allowed))})"
    rest = _FIELD.sub("", text)
    if "{" in rest or "}" in rest:
        return "a brace outside a {name} placeholder (no attribute, index or format spec)"
    return None


def render(text: str, values: Mapping[str, Any]) -> str:
    """A checked template with each ``{name}`` replaced by ``str(values[name])`` (at most 200 characters each)."""
    def one(m) -> str:
        shown = str(values.get(m.group(1)))
        return shown if len(shown) <= 200 else shown[:200] + "..."

    return _FIELD.sub(one, text)
