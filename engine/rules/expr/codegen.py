"""A profile compiled for estimates: what depends on batch and sequence, as one Python function.

An estimate evaluates a profile's formulas in two stages. The *static* stage holds every
formula that does not depend on ``batch_size`` or ``seq_len``; it is evaluated formula by
formula (each a checked, compiled expression over a mapping) once per model and setting
combination, and kept. The *dynamic* stage holds the rest; it is compiled to one
straight-line Python function of (batch_size, seq_len, the static values it reads), with
every formula a local assignment and every layer-scope formula a pass over the layer
classes, so that trying another batch or sequence length costs a function call.

The function is generated from the checked expression trees (:func:`vramwise.rules.expr.language.emit`),
never from text as written, and runs with no builtins. Its guards are chosen from the
types the static values actually have; the program is cached per profile and per type
signature. It computes exactly what the formula-by-formula evaluation computes (same
trees, same operation order, the same rounding of components); when it raises, the
formula-by-formula evaluation runs instead and reports the failing formula.
"""

from __future__ import annotations

import hashlib
import operator
from dataclasses import dataclass, field
from functools import lru_cache
from types import CodeType
from typing import Any, Callable, Mapping

from vramwise.rules import diskcache
from vramwise.rules.expr import language
from vramwise.rules.expr.language import ANY, GLOBALS, NUMBER, emit, type_tag

__all__ = ["DYNAMIC_INPUTS", "Program", "build_program", "dynamic_ids", "stored_program"]

#: Settings that change between the estimates of one model most often.
DYNAMIC_INPUTS = ("batch_size", "seq_len")


#: How the generated code reduces a per-class list ``X`` over the classes with counts ``_cnt``: builtins called
#: directly, with no Python frame between (the sum: each class's value times its count, added from 0 in class order;
#: the largest and smallest: over the classes' values, 0 when there is none).
_REDUCERS = {
    "layers_sum": "_vw_sum(_vw_map(_vw_times, _cnt, {}))",
    "layers_max": "_vw_max({}, default=0)",
    "layers_min": "_vw_min({}, default=0)",
}
_GLOBALS = dict(GLOBALS, _vw_sum=sum, _vw_map=map, _vw_times=operator.mul, _vw_int=int, _vw_range=range)


def dynamic_ids(formulas) -> frozenset:
    """Ids of the formulas that depend, directly or through other formulas, on batch or sequence."""
    dynamic: set[str] = set(DYNAMIC_INPUTS)
    for f in formulas:  # dependency order
        if f.expr.names & dynamic:
            dynamic.add(f.id)
    return frozenset(dynamic - set(DYNAMIC_INPUTS))


@dataclass(frozen=True)
class Program:
    """The dynamic stage of a profile for one type signature of its static inputs."""

    function: Callable  # (batch_size, seq_len, static inputs tuple) -> (model values, layer value lists)
    inputs: tuple  # ((name, "model"|"layer"), ...): the order of the static inputs tuple
    model_ids: tuple  # dynamic model-scope formula ids, in the order of the first result
    layer_ids: tuple  # dynamic layer-scope formula ids, in the order of the second result
    text: str  # the generated Python code (for reading and debugging)
    code: CodeType | None = field(default=None, repr=False, compare=False)  # ``text`` compiled (defines ``function``)


class Invalid(Exception):
    """A figure of the compiled stage broke an invariant (the caller re-checks and reports it)."""


def _invalid() -> None:
    raise Invalid()


#: The largest figure an estimate may report (2**80 bytes, a yottabyte): beyond it a result is a bug.
MAX_FIGURE = 2**80

_GLOBALS.update(_vw_invalid=_invalid, _vw_most=MAX_FIGURE)


def build_program(formulas, dynamic: frozenset, rounded: frozenset, model_types: Mapping[str, frozenset],
                  layer_types: Mapping[str, frozenset], positive: frozenset = frozenset(),
                  finite: frozenset = frozenset()) -> Program:
    """Generate the dynamic stage.

    ``formulas`` in dependency order; ``dynamic``: ids to compile; ``rounded``: model-scope ids
    rounded to whole bytes; ``model_types``: type classes of the static model-level names;
    ``layer_types``: type classes of the per-class names (attributes and static layer formulas).
    The function calls ``_vw_invalid`` (raising :class:`Invalid`) when a rounded figure is negative,
    an id in ``positive`` is not finite and > 0, or an id in ``finite`` is not finite and >= 0.
    """
    body: list[str] = []
    used: dict[str, str] = {}  # static input name -> "model" | "layer"
    types: dict[str, frozenset] = {}
    model_out: list[str] = []
    layer_out: list[str] = []
    layer_dynamic: set[str] = set()

    def model_name(n: str) -> str:
        if n in DYNAMIC_INPUTS:
            return f"v_{n}"
        if n in types or n in layer_dynamic:
            return f"v_{n}"
        used.setdefault(n, "model")
        return f"v_{n}"

    def model_type(n: str) -> frozenset:
        if n in DYNAMIC_INPUTS:
            return NUMBER
        return types.get(n) or model_types.get(n, ANY)

    def reducer(fname: str, arg: str) -> str | None:
        form = _REDUCERS[fname]
        if arg in layer_dynamic:
            return form.format(f"l_{arg}")
        if arg in layer_types:
            used.setdefault(arg, "layer")
            return form.format(f"L_{arg}")
        return None  # not per layer: the plain call, which fails as the formula-by-formula evaluation does

    def layer_name(n: str) -> str:
        if n in layer_dynamic:
            return f"a_{n}"
        if n in layer_types:
            used.setdefault(n, "layer")
            return f"a_{n}"
        return model_name(n)

    def layer_type(n: str) -> frozenset:
        if n in layer_dynamic:
            return types[n]
        if n in layer_types:
            return layer_types[n]
        return model_type(n)

    pending_loop: list[tuple] = []  # consecutive layer formulas share one pass over the classes

    def flush() -> None:
        if not pending_loop:
            return
        block = {f.id for f, _ in pending_loop}
        names = {n for f, _ in pending_loop for n in f.expr.names}
        for f, _ in pending_loop:
            body.append(f"l_{f.id} = []")
        body.append("for _k in _vw_range(_vw_len(_cnt)):")
        for n in sorted(names):
            if n in layer_dynamic and n not in block:  # computed by an earlier pass
                body.append(f"    a_{n} = l_{n}[_k]")
            elif n in layer_types and n not in layer_dynamic:
                used.setdefault(n, "layer")
                body.append(f"    a_{n} = L_{n}[_k]")
        for f, text in pending_loop:
            body.append(f"    a_{f.id} = {text}")
            body.append(f"    l_{f.id}.append(a_{f.id})")
        pending_loop.clear()

    for f in formulas:
        if f.id not in dynamic:
            continue
        node = f.expr.node
        if f.scope == "layer":
            if node is None:
                text, t = repr(f.expr.literal), type_tag(f.expr.literal)
            else:
                text, t = emit(node, layer_name, layer_type, reducer)
            layer_dynamic.add(f.id)
            types[f.id] = t
            pending_loop.append((f, text))
            layer_out.append(f.id)
            continue
        flush()
        if node is None:
            text, t = repr(f.expr.literal), type_tag(f.expr.literal)
        else:
            text, t = emit(node, model_name, model_type, reducer)
        types[f.id] = t
        body.append(f"v_{f.id} = {text}")
        if f.id in rounded:  # language.round_bytes, written out (a call per figure was a tenth of the stage's time)
            types[f.id] = NUMBER
            body.append(f"v_{f.id} = _vw_int(v_{f.id} + 0.5) if v_{f.id} >= 0 else -_vw_int(-v_{f.id} + 0.5)")
        model_out.append(f.id)
    flush()
    checks = [f"0 <= v_{i} <= _vw_most" for i in model_out if i in rounded]
    checks += [f"0 < v_{i} <= _vw_most" for i in model_out if i in positive]
    checks += [f"0 <= v_{i} <= _vw_most" for i in model_out if i in finite and i not in positive]
    if checks:
        body.append("if not (" + " and ".join(checks) + "):")
        body.append("    _vw_invalid()")
    inputs = tuple(sorted(used.items()))
    unpack = ", ".join((f"v_{n}" if kind == "model" else f"L_{n}") for n, kind in inputs)
    lines = ["def _dynamic(v_batch_size, v_seq_len, _static, _cnt):"]
    if inputs:
        lines.append(f"    ({unpack},) = _static")
    lines += [f"    {line}" for line in body]
    lines.append(
        "    return (" + "".join(f"v_{i}, " for i in model_out) + "), (" + "".join(f"l_{i}, " for i in layer_out) + ")"
    )
    program_text = "\n".join(lines) + "\n"
    code = compile(program_text, "<profile program>", "exec")
    return _program(code, inputs, tuple(model_out), tuple(layer_out), program_text)


def _program(code: CodeType, inputs: tuple, model_ids: tuple, layer_ids: tuple, text: str) -> Program:
    scope: dict[str, Any] = dict(GLOBALS, **_GLOBALS)  # GLOBALS: with the functions registered since import
    exec(code, scope)  # noqa: S102 - emitted from checked trees only (here or, stored, by an earlier process)
    return Program(scope["_dynamic"], inputs, model_ids, layer_ids, text, code)


@lru_cache(maxsize=1)
def _source_key() -> bytes:
    """This module's and the expression language's source: the code a stored program holds is theirs."""
    return diskcache.source_digest(__file__, language.__file__)


def _program_key(formulas, dynamic: frozenset, rounded: frozenset, model_types: Mapping, layer_types: Mapping,
                 positive: frozenset, finite: frozenset) -> bytes:
    """Everything :func:`build_program` reads, as a digest: each dynamic formula's id, scope and checked text (the
    tree it emits from is that text parsed), the ids rounded or guarded, and the type signature."""
    h = hashlib.blake2b(_source_key(), digest_size=20)
    for f in formulas:
        if f.id in dynamic:
            lit = f.expr.literal if f.expr.code is None else None  # (no tree asked for: a stored one is parsed lazily)
            h.update(repr((f.id, f.scope, f.expr.text, type(lit).__name__, lit, f.id in rounded, f.id in positive,
                           f.id in finite)).encode("utf-8", "surrogatepass") + b"\0")
    for types in (model_types, layer_types):
        h.update(repr(sorted((n, sorted(t)) for n, t in types.items())).encode("utf-8", "surrogatepass") + b"\1")
    return h.digest()


def stored_program(formulas, dynamic: frozenset, rounded: frozenset, model_types: Mapping[str, frozenset],
                   layer_types: Mapping[str, frozenset], positive: frozenset = frozenset(),
                   finite: frozenset = frozenset()) -> Program:
    """:func:`build_program`, with the generated code kept in the disk cache (:mod:`vramwise.rules.diskcache`,
    kind ``programs``) by a digest of what it is generated from: a later process execs the stored code instead of
    generating and compiling it again. The same program either way."""
    if diskcache.cache_dir() is None:
        return build_program(formulas, dynamic, rounded, model_types, layer_types, positive, finite)
    key = _program_key(formulas, dynamic, rounded, model_types, layer_types, positive, finite)
    entry = diskcache.get("programs", key)
    if (type(entry) is tuple and len(entry) == 5 and type(entry[0]) is CodeType and type(entry[4]) is str
            and all(type(x) is tuple for x in entry[1:4])):
        code, inputs, model_ids, layer_ids, text = entry
        return _program(code, tuple(tuple(i) for i in inputs), model_ids, layer_ids, text)
    prog = build_program(formulas, dynamic, rounded, model_types, layer_types, positive, finite)
    diskcache.put("programs", key, (prog.code, prog.inputs, prog.model_ids, prog.layer_ids, prog.text))
    return prog


def static_tuple(program: Program, env: Mapping, layer_envs) -> tuple:
    """The static inputs of ``program`` from the static stage's model env and per-class envs."""
    out = []
    for name, kind in program.inputs:
        if kind == "model":
            out.append(env[name])
        else:
            out.append(tuple(lenv[name] for lenv in layer_envs))
    return tuple(out)
