"""Compute graphs as data: a profile's ``graph`` section, whose value is the buffer ggml-alloc reserves for them.

A formula file may hold one ``graph``: the name formulas read (``id``), the graphs the stack reserves one after
another (``reserves``: each binds ``n_tokens``, ``n_outputs`` and ``n_seqs`` to expressions over the profile's
model-level names), and templates, each serving the model types it lists. A template writes the graph's tensors
in the graph's order: ``inputs`` (the input leafs), ``head``, ``layer`` (once per layer, ``il`` its index) and
``tail``; each tensor its op, element type and shape (expressions over the profile's names, the reserve's and
``il``), the earlier tensors it reads (``src``, by name: the latest tensor of that name; a layer's tensor may
name one its layer writes further on, the previous layer's, where it exists), the tensor it views (``view``), whether it is a graph output, lives in another buffer (``external``: a write into the KV cache) or
exists only where a condition holds (``when``). Weights and the cache are allocated elsewhere and are left out.
A template's expressions may read the profile's layer inputs too, each as the list of its values layer by layer
(``at(conv_state_width, il) > 0``: whether layer il keeps a convolution state), so that one template serves a
model whose layers differ (the profile gives them as :data:`LAYER_VALUES`).

The value is the largest extent of the graphs so built (:mod:`vramwise.profiles.ggml_alloc`): no code here knows
a model; a model type no template serves gives 0.
"""

from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass
from typing import Any, Mapping

from vramwise.errors import EvaluationError, FileFormatError
from vramwise.profiles.env_names import LAYER_VALUES, MODEL_TYPE
from vramwise.profiles.ggml_alloc import INPLACE_OPS, Tensor, graph_extent, graph_states
from vramwise.rules.datafiles import DataFile
from vramwise.rules.expr.language import Expression, compile_expression

__all__ = ["GraphExpression", "compile_graph", "MODEL_TYPE", "LAYER_VALUES", "RESERVE_NAMES", "ELEMENT_BYTES"]

#: What each reserve binds, and the layer index, for a template's expressions.
RESERVE_NAMES = ("n_tokens", "n_outputs", "n_seqs")
LAYER_INDEX = "il"
#: Bytes of one element of the types a compute graph's tensors have (ggml.c type_traits: type_size / blck_size).
ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8, "i8": 1}
SECTIONS = ("inputs", "head", "layer", "tail")
#: The layers of the short graph a deep one is placed with, where that is the same (GraphExpression._extent).
SHORT = 8


@dataclass(frozen=True)
class _Node:
    t: str
    op: str
    type: str
    shape: tuple  # of Expression; () for a view or an external tensor
    src: tuple  # names
    view: str | None
    external: bool
    output: bool
    when: Expression | None


@dataclass(frozen=True)
class _Template:
    name: str
    model_types: tuple
    sections: tuple  # (inputs, head, layer, tail), each a tuple of _Node
    layer_il: tuple  # the layer's expressions that read il, one of each text


@dataclass(frozen=True, eq=False)
class GraphExpression(Expression):
    """The bytes ggml-alloc reserves for a profile's graphs: an expression whose value is a simulation."""

    reserves: tuple = ()  # of (n_tokens, n_outputs, n_seqs) Expressions
    templates: tuple = ()  # of _Template
    layers: str = ""  # the name of the layer count
    layer_inputs: tuple = ()  # the profile's layer inputs the templates read (as LAYER_VALUES gives them)

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        template = next((t for t in self.templates if env.get(MODEL_TYPE) in t.model_types), None)
        if template is None:
            return 0
        if self.layer_inputs:  # each layer input read as its list of per-layer values
            env = ChainMap(dict(env[LAYER_VALUES]), env)
        try:
            return max(self._extent(template, env, tuple(e.evaluate(env) for e in r), int(env[self.layers]))
                       for r in self.reserves)
        except EvaluationError:
            raise
        except Exception as exc:  # noqa: BLE001 - a graph that cannot be built is reported with its place
            raise self.failure(exc, env) from None

    def _extent(self, template: _Template, env: Mapping[str, Any], bound: tuple, n_layers: int) -> int:
        """The extent of one reserve's graph of ``n_layers`` layers. A deep graph is placed with fewer layers
        where that is provably the same: in the graph of ``SHORT`` (or one more) layers, the allocator's state
        before layer i + p equals its state before layer i (graph_states), and the deep graph's layers are the
        short one's with layers i to i + p - 1 repeated. Each repetition starts where the last one started, does
        what it did, and ends where it ended, raising the extent no further (the extent is part of the state);
        what follows starts where the short graph's layer i + p did. The prefix's inputs, read by every layer,
        are freed after the last one in both graphs."""
        if n_layers > SHORT + 1:
            short = SHORT + (n_layers - SHORT) % 2  # the same parity: a period of 2 layers fits the difference
            rows, marks, keys = _build(template, env, bound, short, self.layers)
            extent, states = graph_states(rows, marks)
            deep = _layer_keys(template, env, bound, n_layers, self.layers)
            for p in (1, 2):
                for i in range(short - p):
                    if (n_layers - short) % p == 0 and states[i] == states[i + p] and \
                            deep == keys[:i + p] + keys[i:i + p] * ((n_layers - short) // p) + keys[i + p:]:
                        return extent
        return graph_extent(_build(template, env, bound, n_layers, self.layers)[0])

    def names_read(self, env: Mapping[str, Any]) -> frozenset:
        return self.names


def _layer_keys(template: _Template, env: Mapping[str, Any], bound: tuple, n_layers: int, layers: str) -> list:
    """Each layer's key: the values of what the layer's expressions read of ``il``, for ``n_layers`` layers."""
    scope = ChainMap(dict(zip(RESERVE_NAMES, bound), **{LAYER_INDEX: 0, layers: n_layers}), env)
    keys = []
    for il in range(n_layers):
        scope.maps[0][LAYER_INDEX] = il
        keys.append(tuple(e.evaluate(scope) for e in template.layer_il))
    return keys


def _build(template: _Template, env: Mapping[str, Any], bound: tuple, n_layers: int, layers: str) -> tuple:
    """The graph's rows: the inputs (leafs), then the head, each layer and the tail (nodes), of ``n_layers``
    layers; with the row each layer starts at and each layer's key. A layer's tensors are worked out once for
    each value of what its expressions read of ``il`` (the last layer, a sliding one) and placed again for every
    layer that has it."""
    scope = ChainMap(dict(zip(RESERVE_NAMES, bound), **{LAYER_INDEX: 0, layers: n_layers}), env)
    rows: list[Tensor] = []
    index: dict[str, int] = {}
    root: dict[int, int] = {}  # a view's row -> the row it looks into
    inputs, head, layer, tail = template.sections

    def plan(nodes) -> list:
        out = []
        for n in nodes:
            if n.when is not None and not n.when.evaluate(scope):
                continue
            if n.view is not None or n.external:
                out.append((n.t, n.src, n.view, n.external, 0, None, False, False))
                continue
            shape = tuple(int(e.evaluate(scope)) for e in n.shape)
            count = 1
            for d in shape:
                count *= d
            out.append((n.t, n.src, None, False, count * ELEMENT_BYTES[n.type], (n.type, shape), n.op in INPLACE_OPS,
                        n.output))
        return out

    def place(entries, leaf: bool) -> None:
        for name, src, view, external, nbytes, layout, inplace, output in entries:
            missing = [s for s in (*src, *([view] if view else ())) if s not in index]
            if missing:  # a layer's read of the layer before it, in the first layer
                raise ValueError(f"tensor {name!r} of layer {scope.maps[0][LAYER_INDEX]} reads {missing[0]!r}, which no "
                                 f"earlier tensor of the graph is")
            srcs = tuple(index[s] for s in src)
            k = len(rows)
            if view is not None:
                target = index[view]
                r = root.get(target, target)
                root[k] = r
                rows.append(Tensor(0, True, srcs, r))
            elif external:
                rows.append(Tensor(0, True, srcs, None, False, None, False, False, True))
            else:
                rows.append(Tensor(nbytes, not leaf, srcs, None, inplace, layout, leaf, output, False))
            index[name] = k

    place(plan(inputs), True)
    place(plan(head), False)
    plans: dict[tuple, list] = {}
    layer_vars = scope.maps[0]
    marks, keys = [], []
    for il in range(n_layers):
        layer_vars[LAYER_INDEX] = il
        key = tuple(e.evaluate(scope) for e in template.layer_il)
        entries = plans.get(key)
        if entries is None:
            entries = plans[key] = plan(layer)
        marks.append(len(rows))
        keys.append(key)
        place(entries, False)
    place(plan(tail), False)
    return tuple(rows), tuple(marks), keys


def compile_graph(df: DataFile, allowed: frozenset, layers: str,
                  layer_inputs: frozenset = frozenset()) -> tuple[str, GraphExpression, dict]:
    """The ``graph`` section of ``df`` compiled: its id, its expression, and its unit, description and source.
    ``layer_inputs``: the profile's layer inputs, which a template's tensors may read as per-layer lists."""
    g = df.data["graph"]
    base = ("graph",)
    names: set[str] = {MODEL_TYPE, layers}
    reserves = []
    for k, r in enumerate(g["reserves"]):
        exprs = tuple(compile_expression(r[n], allowed=allowed, df=df, parts=base + ("reserves", k, n))
                      for n in RESERVE_NAMES)
        names.update(*(e.names for e in exprs))
        reserves.append(exprs)
    local = allowed | set(RESERVE_NAMES) | {LAYER_INDEX} | set(layer_inputs)
    per_layer: set[str] = set()
    templates = []
    problems: list[str] = []
    for k, t in enumerate(g["templates"]):
        sections = []
        defined: set[str] = set()
        for section in SECTIONS:
            nodes = []
            # a layer may read what the layer before it wrote (the graph's order need not follow the code's layers)
            later = {n["t"] for n in t.get(section) or ()} if section == "layer" else set()
            for j, n in enumerate(t.get(section) or ()):
                parts = base + ("templates", k, section, j)
                for s in n.get("src", ()):
                    if s not in defined and s not in later:
                        problems.append(df.problem(parts + ("src",), f"{s!r} is no earlier tensor of the template"))
                if n.get("view") is not None and n["view"] not in defined and n["view"] not in later:
                    problems.append(df.problem(parts + ("view",), f"{n['view']!r} is no earlier tensor of the template"))
                plain = n.get("view") is None and not n.get("external", False)
                if plain and (n.get("type") not in ELEMENT_BYTES or not n.get("shape")):
                    problems.append(df.problem(parts, "a tensor that is neither a view nor external needs a type "
                                                      f"({', '.join(ELEMENT_BYTES)}) and a shape"))
                    continue
                if section == "inputs" and not plain:
                    problems.append(df.problem(parts, "an input is a tensor of its own (no view, not external)"))
                    continue
                shape = tuple(compile_expression(e, allowed=local, df=df, parts=parts + ("shape", i))
                              for i, e in enumerate(n.get("shape", ()) if plain else ()))
                when = (compile_expression(n["when"], allowed=local, df=df, parts=parts + ("when",), what="condition")
                        if "when" in n else None)
                read = set().union(*(e.names for e in shape), *([when.names] if when else []))
                names.update(read - set(RESERVE_NAMES) - {LAYER_INDEX} - set(layer_inputs))
                per_layer.update(read & set(layer_inputs))
                nodes.append(_Node(n["t"], n.get("op", "NONE"), n.get("type", "f32"), shape, tuple(n.get("src", ())),
                                   n.get("view"), bool(n.get("external", False)), bool(n.get("output", False)), when))
                defined.add(n["t"])
            sections.append(tuple(nodes))
        layer_il = {e.text: e for n in sections[2] for e in (*n.shape, *([n.when] if n.when else ()))
                    if LAYER_INDEX in e.names}
        templates.append(_Template(t["name"], tuple(t["model_types"]), tuple(sections), tuple(layer_il.values())))
    if problems:
        raise FileFormatError(problems)
    if per_layer:
        names.add(LAYER_VALUES)
    n_nodes = sum(len(s) for t in templates for s in t.sections)
    expr = GraphExpression(
        text=f"ggml-alloc over the graphs of {', '.join(t.name for t in templates)} ({n_nodes} tensors written, "
             f"{len(reserves)} reserves)",
        names=frozenset(names), where=df.where(base), reserves=tuple(reserves), templates=tuple(templates),
        layers=layers, layer_inputs=tuple(sorted(per_layer)))
    return g["id"], expr, {"unit": g["unit"], "description": g["description"], "source": g["source"]}
