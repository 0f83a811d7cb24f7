"""The layer plan: which layers share every attribute, found without visiting every layer.

A family's per-layer attributes depend on the layer index ``i`` only through a few
kinds of sub-expression, the *atoms*:

- ``xs[i]`` and ``at(xs, i)``: an entry of a per-layer list;
- a comparison with ``i`` itself as an operand (``i < k``, ``a <= i <= b``, ``i in xs``);
- a residue ``(i + a) % k`` (also ``i % k``, ``(a + i) % k``, ``(i - a) % k``).

:func:`analyse` finds them once per family (an attribute that uses ``i`` any other way
makes the family fall back to visiting every layer). Two layers whose atoms all have
equal values have equal attributes, because the atoms are the only way the attributes
can tell layers apart. For a config, each atom is cheap to describe over the index
range: a comparison changes value only next to its numeric operands (breakpoints), a
list only where its entries change or at its end (or it repeats with a short period),
a residue repeats with period ``k``. Between breakpoints every atom is constant or
periodic, so probing the first period of each segment finds every distinct layer;
the attributes are then evaluated once per distinct combination of atom values. The
cost grows with the number of breakpoints and distinct layer kinds, not with the
number of layers, and a per-layer list costs one pass over the list.
"""

from __future__ import annotations

import ast
import bisect
import heapq
import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from vramwise.errors import ConfigError, EvaluationError
from vramwise.rules.expr.language import compile_fragment, evaluate_fragment

__all__ = ["IndexSet", "Analysis", "analyse", "plan_layers", "layer_classes", "Unplannable"]

#: Longest period a list is searched for before it is treated as irregular.
_MAX_LIST_PERIOD = 256
#: Most probes of the segment walk; beyond it (a pathological period) every layer is visited.
_MAX_PROBES = 1_000_000


class Unplannable(Exception):
    """The layer plan cannot be derived from atoms for this config; visit every layer instead."""


class IndexSet(Sequence):
    """Sorted, distinct layer indices held as arithmetic progressions (``range`` objects)."""

    __slots__ = ("_runs", "_len", "_interleaved", "_starts", "_set")

    def __init__(self, runs: Sequence[range] = ()):
        self._runs = tuple(sorted((range(r.start, r[-1] + 1, r.step) for r in runs if len(r)), key=lambda r: r.start))
        self._len = sum(len(r) for r in self._runs)
        # progressions of one residue class each may interleave (layers 0, 2, 4 ... and 1, 3, 5 ...)
        self._interleaved = any(a[-1] >= b.start for a, b in zip(self._runs, self._runs[1:]))
        self._starts = [r.start for r in self._runs]
        self._set = None  # membership of a small interleaved set, built when first asked

    @classmethod
    def of(cls, indices) -> "IndexSet":
        """From increasing integers (merged into progressions)."""
        return cls(_progressions([range(i, i + 1) for i in indices]))

    @property
    def runs(self) -> tuple:
        return self._runs

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        if self._interleaved:
            yield from heapq.merge(*self._runs)
            return
        for r in self._runs:
            yield from r

    def __getitem__(self, k):
        if k == 0 and self._runs:
            return self._runs[0].start
        if isinstance(k, slice) or self._interleaved:
            return tuple(self)[k]
        if k < 0:
            k += self._len
        if not 0 <= k < self._len:
            raise IndexError("layer index position out of range")
        for r in self._runs:
            if k < len(r):
                return r[k]
            k -= len(r)
        raise IndexError(k)  # pragma: no cover

    def __contains__(self, i) -> bool:
        if len(self._runs) == 1:
            return i in self._runs[0]
        if self._interleaved:
            if self._set is None and self._len <= 1 << 16:
                self._set = frozenset(self)
            return i in self._set if self._set is not None else any(i in r for r in self._runs)
        k = bisect.bisect_right(self._starts, i) - 1  # runs are sorted and disjoint
        return k >= 0 and i in self._runs[k]

    def __eq__(self, other) -> bool:
        if isinstance(other, IndexSet):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        if isinstance(other, (tuple, list, range)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._runs)

    def __repr__(self) -> str:
        return f"IndexSet({list(self._runs)!r})"


def _progressions(runs: list) -> list:
    """Merge increasing, non-overlapping ranges into as few arithmetic progressions as possible."""
    runs = sorted(runs, key=lambda r: r.start)
    out: list[range] = []
    for r in runs:
        if out:
            last = out[-1]
            if len(last) == 1 and len(r) >= 1 and (len(r) == 1 or r.step == r.start - last.start):
                step = r.start - last.start
                out[-1] = range(last.start, r[-1] + step, step)
                continue
            nxt = last[-1] + last.step
            if r.start == nxt and (len(r) == 1 or r.step == last.step):
                out[-1] = range(last.start, r[-1] + last.step, last.step)
                continue
        out.append(r)
    return out


# -- analysis (once per family) ----------------------------------------------------------


@dataclass(frozen=True)
class _Atom:
    kind: str  # "list", "at", "compare", "member", "residue"
    code: Any  # evaluates the atom itself over an env holding i
    operands: tuple  # code objects of the i-free operands (list / container / compared values / offset, modulus)
    negate: bool = False  # member: `not in`
    sign: int = 1  # residue: +1 for i + a, -1 for a - i (not produced), offsets carry their own sign


@dataclass(frozen=True)
class Analysis:
    """The atoms of a family's per-layer attributes (``None`` from :func:`analyse` when it has others)."""

    atoms: tuple


def _compile(node: ast.AST) -> Any:
    return compile_fragment(node, "<layer plan>")


def _uses(node: ast.AST, names: frozenset) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def analyse(attributes) -> Analysis | None:
    """Atoms of the per-layer attributes (``AttributeRule``s with ``per_layer``); None if ``i`` is used otherwise."""
    varying = frozenset(a.name for a in attributes if a.per_layer)
    dependent = varying | {"i"}
    atoms: list[_Atom] = []

    def is_i(n: ast.AST) -> bool:
        return isinstance(n, ast.Name) and n.id == "i"

    def free(n: ast.AST) -> bool:
        return not _uses(n, dependent)

    def offsets(n: ast.AST) -> list | None:
        """The i-free terms of ``n`` when ``n`` is ``i`` plus or minus them, else None."""
        if is_i(n):
            return []
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub)):
            if isinstance(n.op, ast.Add) and is_i(n.right) and free(n.left):
                return [n.left]
            inner = offsets(n.left)
            if inner is not None and free(n.right):
                return inner + [n.right if isinstance(n.op, ast.Add) else ast.UnaryOp(op=ast.USub(), operand=n.right)]
        return None

    def walk(n: ast.AST) -> None:
        if not _uses(n, frozenset({"i"})):
            return
        if (isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.In, ast.NotIn))
                and not is_i(n.left) and free(n.comparators[0])):
            terms = offsets(n.left)  # (i + a) in xs: membership of i in xs shifted by -a
            if terms:
                total = terms[0]
                for t in terms[1:]:
                    total = ast.BinOp(left=total, op=ast.Add(), right=t)
                atoms.append(_Atom("member", _compile(n), (_compile(n.comparators[0]), _compile(total)),
                                   isinstance(n.ops[0], ast.NotIn)))
                return
        if isinstance(n, ast.Subscript) and is_i(n.slice) and free(n.value):
            atoms.append(_Atom("list", _compile(n), (_compile(n.value),)))
            return
        if isinstance(n, ast.Call) and n.func.id == "at" and len(n.args) == 2 and is_i(n.args[1]) and free(n.args[0]):
            atoms.append(_Atom("at", _compile(n), (_compile(n.args[0]),)))
            return
        if isinstance(n, ast.Compare):
            operands = [n.left, *n.comparators]
            if any(is_i(o) for o in operands) and all(is_i(o) or free(o) for o in operands):
                if any(isinstance(op, (ast.Is, ast.IsNot)) for op in n.ops):
                    raise Unplannable("identity comparison with the layer index")
                if len(n.ops) == 1 and isinstance(n.ops[0], (ast.In, ast.NotIn)) and is_i(n.left):
                    atoms.append(_Atom("member", _compile(n), (_compile(n.comparators[0]),), isinstance(n.ops[0], ast.NotIn)))
                    return
                if any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops):
                    raise Unplannable("membership of the layer index in a comparison chain")
                atoms.append(_Atom("compare", _compile(n), tuple(_compile(o) for o in operands if not is_i(o))))
                return
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and free(n.right):
            terms = offsets(n.left)
            if terms is not None:
                total = terms[0] if terms else ast.Constant(0)
                for t in terms[1:]:
                    total = ast.BinOp(left=total, op=ast.Add(), right=t)
                atoms.append(_Atom("residue", _compile(n), (_compile(total), _compile(n.right))))
                return
        if is_i(n):
            raise Unplannable("the layer index is used outside an indexing, comparison or residue")
        for child in ast.iter_child_nodes(n):
            walk(child)

    try:
        for a in attributes:
            if a.per_layer and a.expr.node is not None:
                walk(a.expr.node)
    except Unplannable:
        return None
    return Analysis(tuple(atoms))


# -- planning (once per config) -----------------------------------------------------------


def _key(value: Any) -> Any:
    """A hashable stand-in for an atom value that tells apart values Python calls equal (1, 1.0, True)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted(((repr(k), _key(v)) for k, v in value.items()))))
    try:
        hash(value)
    except TypeError:
        return (type(value).__name__, repr(value))
    if isinstance(value, float) and value != value:
        return ("float", "nan")
    return (type(value).__name__, value)


def _value(code, env: dict, i: int) -> Any:
    env["i"] = i
    try:
        return _key(evaluate_fragment(code, env))
    except Exception as exc:  # noqa: BLE001 - an atom that fails fails the same way on every layer of its segment
        return ("error", type(exc).__name__, str(exc))


def _eval(code, env: Mapping) -> tuple[bool, Any]:
    try:
        return True, evaluate_fragment(code, env)
    except Exception:  # noqa: BLE001 - the atom then raises alike on every layer
        return False, None


def _breakpoints_of(number: Any, out: set) -> None:
    if isinstance(number, (bool, int)):
        out.update((int(number), int(number) + 1))
    elif isinstance(number, float) and math.isfinite(number):
        f = math.floor(number)
        out.update((f, f + 1))


def _list_period(keys: Sequence) -> int | None:
    """The smallest period p <= _MAX_LIST_PERIOD with keys[j] == keys[j + p] throughout, else None."""
    n = len(keys)
    for p in range(1, min(_MAX_LIST_PERIOD, n) + 1):
        if keys[p:p + 64] == keys[:min(64, n - p)] and keys[p:] == keys[:n - p]:
            return p
    return None


_BEYOND = ("beyond the list",)  # the value of xs[i] past its end: the same IndexError on every such layer


def plan_layers(analysis: Analysis, env: Mapping, n: int) -> list[tuple[int, IndexSet]]:
    """Distinct layers of a config: (representative index, every index of that kind), in order of first index.

    ``env`` holds the facts and the attributes that do not depend on the layer. Raises
    :class:`Unplannable` when an atom's operands have a type the plan cannot describe.
    """
    breaks: set[int] = set()
    period = 1
    readers = []  # per atom whose value can differ between layers: layer index -> a hashable stand-in
    scope = dict(env)
    for atom in analysis.atoms:
        ok, values = zip(*(_eval(c, env) for c in atom.operands)) if atom.operands else ((), ())
        if atom.kind in ("list", "at"):
            xs = values[0]
            if not ok[0] or xs is None or isinstance(xs, (bool, int, float)):
                continue  # raises (or, for at, returns the scalar) alike on every layer
            if atom.kind == "at" and not isinstance(xs, (list, tuple)):
                continue
            if not isinstance(xs, (list, tuple, str)):
                raise Unplannable(f"a per-layer field of type {type(xs).__name__}")
            keys = xs if isinstance(xs, str) or all(type(x) is str for x in xs) else [_key(x) for x in xs]
            breaks.add(len(keys))
            p = _list_period(keys)
            if p is not None:
                period = math.lcm(period, p)
            else:
                breaks.update(j for j in range(1, len(keys)) if keys[j] != keys[j - 1])
            readers.append(lambda i, keys=keys, size=len(keys): keys[i] if i < size else _BEYOND)
        elif atom.kind == "compare":
            own: set[int] = set()
            for good, v in zip(ok, values):
                if good:
                    _breakpoints_of(v, own)
            points = sorted(b for b in own if 0 < b < n)
            breaks.update(points)
            # constant between its own breakpoints: evaluated once per interval
            at_start = [_value(atom.code, scope, b) for b in [0] + points]
            readers.append(lambda i, points=points, at_start=at_start: at_start[bisect.bisect_right(points, i)])
        elif atom.kind == "member":
            container = values[0]
            if not ok[0] or not isinstance(container, (list, tuple, dict)):
                continue  # raises, or is False, alike on every layer
            shift = values[1] if len(values) > 1 else 0  # (i + shift) in container
            if len(values) > 1 and (not ok[1] or isinstance(shift, bool) or not isinstance(shift, int)):
                raise Unplannable("membership of the layer index plus a non-integer offset")
            hits = set()
            for e in container:
                if isinstance(e, (bool, int)) or (isinstance(e, float) and math.isfinite(e) and e.is_integer()):
                    hits.add(int(e) - shift)
            for h in hits:
                breaks.update((h, h + 1))
            readers.append(lambda i, hits=hits, negate=atom.negate: (i in hits) != negate)
        else:  # residue
            (ok_a, ok_k), (a, k) = ok, values
            if not (ok_a and ok_k):
                continue  # raises alike on every layer
            if not isinstance(a, (int, float)) or not isinstance(k, (int, float)):
                continue  # a type error on every layer
            if isinstance(k, float) and k.is_integer() and math.isfinite(k):
                k = int(k)
            if not isinstance(k, int):
                raise Unplannable("a residue with a fractional modulus")
            if k == 0:
                continue  # division by zero on every layer
            if isinstance(a, int) and not isinstance(a, bool):
                if abs(k) == 1:
                    continue  # always 0
                period = math.lcm(period, abs(k))
                readers.append(lambda i, a=a, k=k: ("int", (i + a) % k))  # what _key gives the evaluated atom
            else:
                period = math.lcm(period, abs(k))
                readers.append(lambda i, code=atom.code: _value(code, scope, i))
    points = sorted(b for b in breaks if 0 < b < n)
    starts = [0] + points
    ends = points + [n]
    probes = sum(min(period, e - s) for s, e in zip(starts, ends))
    if probes > _MAX_PROBES:
        raise Unplannable("too many distinct layer positions")
    groups: dict[tuple, tuple[int, list]] = {}
    for s, e in zip(starts, ends):
        for i in range(s, min(s + period, e)):
            key = tuple([read(i) for read in readers])
            if key in groups:
                groups[key][1].append(range(i, e, period))
            else:
                groups[key] = (i, [range(i, e, period)])
    out = [(first, IndexSet(_progressions(runs))) for first, runs in groups.values()]
    out.sort(key=lambda item: item[0])
    return out


# -- layer classes (once per config) -------------------------------------------------------


def layer_classes(family, env: dict, n_layers: int) -> list[tuple[IndexSet, dict]]:
    """The distinct layers of a model of ``family`` (a compiled Family) over its facts ``env``: (their
    indices, their attributes), in order of first index. Layers with equal attributes are one class."""
    fixed: dict[str, Any] = {}
    for a in family.attributes:
        if not a.per_layer:
            try:
                fixed[a.name] = a.expr.evaluate({**env, **fixed})
            except EvaluationError as e:
                raise ConfigError(f"the config's values do not fit the family's rule for {a.name}: {e}") from None
    varying = [a for a in family.attributes if a.per_layer]
    if n_layers == 0:
        return []
    if not varying:
        return [(IndexSet([range(n_layers)]), fixed)]
    scope = {**env, **fixed}
    try:
        if family.layer_atoms is None:
            raise Unplannable("the family uses the layer index outside the planned forms")
        probes = plan_layers(family.layer_atoms, scope, n_layers)
    except Unplannable:
        probes = [(i, IndexSet([range(i, i + 1)])) for i in range(n_layers)]
    groups: dict[tuple, tuple[dict, list]] = {}
    for first, indices in probes:
        values = dict(fixed)
        layer_env = {**scope, "i": first}
        for a in varying:
            try:
                values[a.name] = layer_env[a.name] = a.expr.evaluate(layer_env)
            except EvaluationError as e:
                raise ConfigError(f"layer {first}: {e}") from None
        key = tuple(_hashable(values[a.name]) for a in family.attributes)
        if key in groups:
            groups[key][1].extend(indices.runs)
        else:
            groups[key] = (values, list(indices.runs))
    return [(IndexSet(_progressions(runs)), values) for values, runs in groups.values()]


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v
