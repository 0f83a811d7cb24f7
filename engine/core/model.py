"""From a config mapping and a family to a resolved model: facts, layer plan, inventory.

The result, :class:`ModelSpec`, is what every profile is evaluated on. Layers
with identical attributes form one :class:`LayerClass` with its indices, so the
cost of an estimate grows with the number of distinct layer kinds, not with the
number of layers.
"""

from __future__ import annotations

import re

import math
from dataclasses import dataclass, field, fields
from math import prod
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping

from vramwise.core.errors import ConfigError, EvaluationError
from vramwise.core.expr.language import render

from vramwise.core.family import Family, FactRule, ModuleRule, describe_alias_list
from vramwise.core.plan import IndexSet, Unplannable, _progressions, plan_layers

__all__ = ["Module", "LayerClass", "ModelSpec", "Inventory", "LoraSums", "FactOrigin", "resolve_model",
           "AGGREGATE_NAMES", "INVENTORY_NAMES", "LORA_NAMES"]

_MISSING = object()


@dataclass(frozen=True)
class Module:
    """One module with exact shapes. ``path`` holds ``{i}`` for layer modules."""

    name: str
    kind: str
    group: str
    path: str
    shape: tuple
    bias: bool
    quantizable: bool
    lora_parts: tuple  # ((target, in, out, count, explicit_only), ...); a linear also answers to its own name, whole
    repeat: int = 1  # identical copies, numbered by {j} in the path

    @property
    def weight_params(self) -> int:
        return self.repeat * prod(self.shape)

    @property
    def bias_params(self) -> int:
        return self.repeat * self.shape[0] if self.bias else 0

    def paths(self, i: int | None = None) -> list[str]:
        """Concrete path of each copy (layer index ``i`` filled in for a layer module)."""
        path = self.path if i is None else self.path.replace("{i}", str(i))
        if self.repeat == 1 and "{j}" not in path:
            return [path]
        return [path.replace("{j}", str(j)) for j in range(self.repeat)]

    @property
    def params(self) -> int:
        return self.weight_params + self.bias_params

    @property
    def in_features(self) -> int:
        return self.shape[-1]

    @property
    def out_features(self) -> int:
        return self.shape[0]


@dataclass(frozen=True)
class LayerClass:
    """Layers that share every attribute, hence every module shape."""

    indices: tuple
    attributes: Mapping[str, Any]
    modules: tuple  # of Module

    @property
    def count(self) -> int:
        return len(self.indices)

    @property
    def params(self) -> int:
        return sum(m.params for m in self.modules)


def _groups(model_modules: tuple, layer_classes: tuple) -> Iterator[tuple[int, Any, tuple]]:
    """The model's modules as (copies, layer indices or None for model-level modules, modules)."""
    yield 1, None, model_modules
    for lc in layer_classes:
        yield lc.count, lc.indices, lc.modules


@dataclass(frozen=True)
class Inventory:
    """The totals of a resolved model that formula files may read, defined here once.

    Each field is a formula name; its metadata says what it counts.
    """

    params_total: int = field(metadata={"doc": "every parameter, tied weights counted once"})
    quantizable_params: int = field(metadata={"doc": "weights a 4-bit load quantizes (linear layers, experts)"})
    linear_quantizable_params: int = field(metadata={"doc": "quantizable weights of nn.Linear modules"})
    non_quantizable_params: int = field(metadata={"doc": "every other parameter (embeddings, norms, biases, ...)"})
    skipped_quantizable_params: int = field(metadata={"doc": "quantizable weights the checkpoint's skip list keeps in 16 bit"})
    checkpoint_bytes: int | None = field(metadata={"doc": "bytes of the weights stored beside the config, when known"})
    num_layers: int = field(metadata={"doc": "layers of the model"})
    layers_params: int = field(default=0, metadata={"doc": "parameters of the decoder layers (the rest is the root: embeddings, final norm, head)"})
    largest_layer_params: int = field(default=0, metadata={"doc": "parameters of the largest decoder layer (an FSDP / ZeRO-3 unit)"})
    largest_layer_quantizable_params: int = field(default=0, metadata={"doc": "quantizable weights of the largest decoder layer"})
    largest_layer_linear_quantizable_params: int = field(default=0, metadata={"doc": "quantizable nn.Linear weights of the largest decoder layer"})
    largest_module_params: int = field(default=0, metadata={"doc": "parameters of the largest single module (what ZeRO-3 gathers at once)"})

    def names(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: Formula names of the inventory and of the LoRA sums (see LoraSums.formula_names).
INVENTORY_NAMES = tuple(f.name for f in fields(Inventory))
LORA_NAMES = ("lora_io", "lora_inputs", "lora_adapters", "lora_merged_params")
AGGREGATE_NAMES = frozenset(INVENTORY_NAMES + LORA_NAMES)
INVENTORY_DOCS = {f.name: f.metadata["doc"] for f in fields(Inventory)}


@dataclass(frozen=True, eq=False)
class ModelSpec:
    """A model resolved against its family: what every estimate is computed from."""

    family: str
    family_file: str
    model_type: str | None
    facts: Mapping[str, Any]
    num_layers: int
    layer_classes: tuple
    model_modules: tuple
    warnings: tuple = ()
    source: str = ""
    # where PEFT moves LoRA targets onto parameters for this model type (family data, resolved once)
    peft_target_parameters: Mapping[str, str] = field(default_factory=dict)
    rules: Family | None = field(default=None, repr=False)  # the compiled family it was resolved with
    fact_origins: Mapping[str, "FactOrigin"] = field(default_factory=dict, repr=False)  # where each fact came from
    inventory: Inventory | None = None
    params_by_group: Mapping[str, int] = field(default_factory=dict)

    @property
    def params_total(self) -> int:
        return self.inventory.params_total

    @property
    def aggregates(self) -> Mapping[str, Any]:
        """Inventory totals offered to formula files (see :class:`Inventory`)."""
        return self.inventory.names()

    def module_groups(self) -> Iterator[tuple[int, Any, tuple]]:
        """(copies, layer indices or None for model-level modules, modules) for every group of modules."""
        return _groups(self.model_modules, self.layer_classes)

    def modules(self) -> Iterable[tuple[str, Module]]:
        """Every module copy with its concrete path (layer modules once per layer index)."""
        for _, indices, mods in self.module_groups():
            for i in (indices if indices is not None else (None,)):
                for m in mods:
                    for path in m.paths(i):
                        yield path, m

    def module_params(self) -> dict[str, int]:
        """Parameter count per module path (weights plus bias, one copy)."""
        return {path: m.params // m.repeat for path, m in self.modules()}

    def lora_sums(self, targets: frozenset, explicit: frozenset = frozenset()) -> "LoraSums":
        """The adapters ``targets`` put on the model: sum of in + out features, sum of in features,
        number of adapters, and the targets that matched.

        A linear module named in ``targets`` gets one adapter sized by its whole shape; otherwise
        every listed part (a fused projection's q/k/v, each routed expert's gate/up/down) whose
        target is named gets its own. Parts marked explicit-only count only for names in
        ``explicit`` (named by the user, not brought in by a keyword such as all-linear).
        """
        io = ins = n_adapters = 0
        matched: set[str] = set()
        for count, _, mods in self.module_groups():
            for m in mods:
                if m.kind == "linear" and m.name in targets:
                    io += count * m.repeat * (m.in_features + m.out_features)
                    ins += count * m.repeat * m.in_features
                    n_adapters += count * m.repeat
                    matched.add(m.name)
                    continue
                for target, fin, fout, n, explicit_only in m.lora_parts:
                    if target in (explicit if explicit_only else targets):
                        io += count * n * (fin + fout)
                        ins += count * n * fin
                        n_adapters += count * n
                        matched.add(target)
        return LoraSums(io, ins, n_adapters, frozenset(matched))

    def peft_lora_sums(self, targets: frozenset) -> "LoraSums":
        """The adapters PEFT itself puts on the model for ``targets``.

        A target matches a linear module whose path ends in that name (PEFT's suffix rule), so
        a fused projection does not answer to the names of its parts. Targets the family's PEFT
        rule maps for this model type (``peft_target_parameters``) are moved to the parameters they name:
        an adapter of rank r x (targets fused there) on each matching parameter, r x E x (in + out)
        for an (E, out, in) expert tensor; those names then no longer match modules.
        """
        mapping = self.peft_target_parameters
        module_targets = {t for t in targets if t not in mapping}
        fused: dict[str, list[str]] = {}
        for t in sorted(targets):
            if t in mapping:
                fused.setdefault(mapping[t], []).append(t)
        io = ins = n_adapters = merged = 0
        matched: set[str] = set()
        for count, _, mods in self.module_groups():
            for m in mods:
                leaf = m.path.rsplit(".", 1)[-1]
                if m.kind == "linear" and leaf in module_targets:
                    io += count * m.repeat * (m.in_features + m.out_features)
                    ins += count * m.repeat * m.in_features
                    n_adapters += count * m.repeat
                    matched.add(leaf)
                    continue
                # a bare parameter is named by its path, a module's weight by path + ".weight"
                param = m.path if m.kind == "parameter" else m.path + ".weight"
                for suffix, names in fused.items():
                    if m.kind != "norm" and (param == suffix or param.endswith("." + suffix)):
                        experts = m.shape[0] if len(m.shape) == 3 else 1
                        io += count * m.repeat * len(names) * experts * (m.shape[-1] + m.shape[-2])
                        merged += count * m.weight_params
                        matched.update(names)
        return LoraSums(io, ins, n_adapters, frozenset(matched), merged)


@dataclass(frozen=True)
class FactOrigin:
    """Where a fact's value came from: a config field, the family's default, or its derivation."""

    how: str  # "config", "default", "derived" or "null" (present in the config as null)
    field: str | None  # the config field that was read (how == "config" or "null")
    where: str  # file:line:col of the fact's rule
    expression: str | None = None  # the derivation (how == "derived")

    def describe(self) -> str:
        if self.how == "config":
            return f"config field {self.field}"
        if self.how == "null":
            return f"config field {self.field} is null"
        if self.how == "derived":
            return f"derived as `{self.expression}`"
        return "default"


@dataclass(frozen=True)
class LoraSums:
    """What a set of LoRA targets puts on a model (see ModelSpec.lora_sums)."""

    io: int  # sum over adapters of in + out features
    inputs: int  # sum over adapters of in features
    adapters: int  # number of adapters
    matched: frozenset  # the targets that matched a module
    merged_params: int = 0  # weights of parameters carrying an adapter (PEFT merges them in the forward)

    def formula_names(self) -> dict:
        """The sums as formula inputs (see :data:`LORA_NAMES`)."""
        return dict(zip(LORA_NAMES, (self.io, self.inputs, self.adapters, self.merged_params)))


#: No adapters (full fine-tuning, inference, the size-only fallback).
NO_ADAPTERS = LoraSums(0, 0, 0, frozenset())


_NULL = object()


def _lookup(mapping: Mapping, path: tuple) -> Any:
    """The value at ``path``; ``_MISSING`` when a key is absent, ``_NULL`` when it is present but null."""
    cur: Any = mapping
    for key in path:
        if isinstance(cur, Mapping) and key in cur:
            cur = cur[key]
        else:
            return _MISSING
    return _NULL if cur is None else cur


#: Bounds of a config value where its family sets none: ints up to 2**31 - 1, lists and strings
#: up to 2**20 elements, every number finite.
INT_MAX = 2**31 - 1
MAX_LENGTH = 2**20


#: Element types accepted without a closer look (the closer look names the first bad element).
_PLAIN = {"int": (int,), "number": (int,), "bool": (bool,), "string": (str,)}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _of_type(t: str, value: Any) -> tuple[bool, Any]:
    """Whether ``value`` has type ``t`` (an integral float counts as an int), and the value as that type."""
    if t == "int":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return isinstance(value, int) and not isinstance(value, bool), value
    if t == "number":
        return _is_number(value) and math.isfinite(value), value
    if t == "bool":
        return isinstance(value, bool), value
    if t == "string":
        return isinstance(value, str), value
    if t == "list":
        return isinstance(value, (list, tuple)), tuple(value) if isinstance(value, (list, tuple)) else value
    return True, value


def _check_type(rule: FactRule, value: Any, origin: str) -> Any:
    """``value`` checked against the fact's type and bounds (the error names the field and the range)."""
    t = rule.type
    raw = value
    ok, value = _of_type(t, value)
    if not ok:
        raise ConfigError(f"{origin} should be {'an' if t == 'int' else 'a'} {t}, got {_short_repr(raw)}")
    if t in ("int", "number"):
        lo = rule.min
        hi = rule.max if rule.max is not None else (INT_MAX if t == "int" else None)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            span = " and ".join(f"{word} {_bound(b)}" for word, b in (("at least", lo), ("at most", hi)) if b is not None)
            raise ConfigError(f"{origin} is {_short_repr(raw)}; it must be {span}")
    elif t in ("list", "string"):
        limit = rule.max_length if rule.max_length is not None else MAX_LENGTH
        if len(value) > limit:
            raise ConfigError(f"{origin} has {len(value):,} {'elements' if t == 'list' else 'characters'}; at most {limit:,} are allowed")
        if t == "list" and rule.items not in (None, "any") and not all(type(x) in _PLAIN[rule.items] for x in value):
            for k, x in enumerate(value):
                good, _ = _of_type(rule.items, x)
                if not good:
                    raise ConfigError(f"{origin}[{k}] should be {'an' if rule.items == 'int' else 'a'} {rule.items}, got {_short_repr(x)}")
    return value


def _bound(b: float) -> str:
    return f"{int(b):,}" if float(b).is_integer() else f"{b:g}"


def _short_repr(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value that cannot be shown is named by its type
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit] + "..."


def _reduce(value: Any, how: str | None, origin: str) -> Any:
    if how is None or not isinstance(value, (list, tuple)):
        return value
    if not value:
        raise ConfigError(f"config field {origin} is an empty list")
    if how == "first":
        return value[0]
    if how == "last":
        return value[-1]
    bad = [x for x in value if not (_is_number(x) and math.isfinite(x))]
    if bad:
        raise ConfigError(f"config field {origin} should hold numbers (its largest is used), got {_short_repr(bad[0])}")
    return max(value)


def _resolve_facts(family: Family, root: Mapping, text: Mapping, warnings: list[str], origins: dict) -> dict:
    """Facts in file order, as transformers' config classes resolve them: a value in the config
    wins; an absent field takes the class default (else the derivation); a field present but
    null takes the derivation (what the class computes from None), else stays None."""
    facts: dict[str, Any] = {}
    for rule in family.facts:
        found = []
        null_seen = None
        for alias in rule.aliases:
            v = _lookup(root if alias.from_root else text, alias.path)
            if v is _NULL:
                null_seen = null_seen or alias.name
            elif v is not _MISSING:
                found.append((alias.name, _reduce(v, alias.reduce, alias.name)))
        if found:
            origin, value = found[0]
            disagree = [n for n, v in found[1:] if v != value]
            if disagree:
                warnings.append(
                    f"config fields {origin} ({value!r}) and {', '.join(disagree)} disagree for {rule.name}; using {origin}"
                )
            label = f"config field {origin}" + ("" if origin == rule.name else f" (read as {rule.name})")
            facts[rule.name] = _check_type(rule, value, label)
            origins[rule.name] = FactOrigin("config", origin, rule.where)
        elif rule.has_default and not null_seen:
            facts[rule.name] = rule.default
            origins[rule.name] = FactOrigin("default", None, rule.where)
        elif rule.derive is not None:
            try:
                value = rule.derive.evaluate(facts)
            except EvaluationError as e:
                raise ConfigError(
                    f"cannot derive {rule.name} (no field among: {describe_alias_list(rule)}): {e}"
                ) from None
            label = f"{rule.name}, derived from the config as `{rule.derive.text}`,"
            facts[rule.name] = value if value is None else _check_type(rule, value, label)
            origins[rule.name] = FactOrigin("derived", None, rule.where, rule.derive.text)
        elif null_seen and rule.has_default:  # explicitly null: transformers keeps None
            facts[rule.name] = None
            origins[rule.name] = FactOrigin("null", null_seen, rule.where)
        elif null_seen:
            raise ConfigError(f"config field for {rule.name} is null (tried: {describe_alias_list(rule)}); family {family.name} needs a value")
        else:
            raise ConfigError(
                f"config has no {rule.name} (tried: {describe_alias_list(rule)}); family {family.name} needs it"
            )
    return facts


#: Largest dimension of a module, and most numbered copies of one (beyond them a config is not a model).
MAX_DIMENSION = 2**40
MAX_COPIES = 2**20


def _whole(value: Any, least: int, most: int) -> int | None:
    """``value`` as an int in [least, most] (an integral float counts), else None."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
        return None
    return value


def _module(rule: ModuleRule, env: Mapping, where_layer: str) -> Module | None:
    if rule.when is not None and not rule.when.evaluate(env):
        return None
    raw = tuple(e.evaluate(env) for e in rule.shape)
    shape = tuple(_whole(d, 1, MAX_DIMENSION) for d in raw)
    if None in shape:
        raise ConfigError(
            f"module {rule.name}{where_layer} gets shape {_short_repr(list(raw))} from the config; every dimension "
            f"must be a whole number from 1 to {MAX_DIMENSION:,} (rule at {rule.where})"
        )
    parts = []
    for p in rule.lora:
        raw_part = (p.in_features.evaluate(env), p.out_features.evaluate(env), p.count.evaluate(env) if p.count is not None else 1)
        fin, fout, n = (_whole(raw_part[0], 1, MAX_DIMENSION), _whole(raw_part[1], 1, MAX_DIMENSION),
                        _whole(raw_part[2], 0, MAX_COPIES))
        if None in (fin, fout, n):
            raise ConfigError(f"module {rule.name}{where_layer} gets LoRA part {p.target} of {_short_repr(list(raw_part))} "
                              f"(in, out, count); they must be whole numbers in range (rule at {rule.where})")
        parts.append((p.target, fin, fout, n, p.explicit_only))
    raw_repeat = rule.repeat.evaluate(env) if rule.repeat is not None else 1
    repeat = _whole(raw_repeat, 0, MAX_COPIES)
    if repeat is None:
        raise ConfigError(f"module {rule.name}{where_layer} gets repeat {_short_repr(raw_repeat)}; it must be a whole "
                          f"number from 0 to {MAX_COPIES:,}")
    if repeat == 0:
        return None
    return Module(
        name=rule.name, kind=rule.kind, group=rule.group, path=rule.path, shape=shape,
        bias=bool(rule.bias.evaluate(env)), quantizable=rule.quantizable, lora_parts=tuple(parts),
        repeat=repeat,
    )


def _split_entries(entries: Iterable[str], roots: tuple) -> tuple[list, list]:
    """A skip list split into entries under a text-tower root (made relative to it) and short entries."""
    ordered = sorted(roots, key=len, reverse=True)
    rooted: list[str] = []
    short: list[str] = []
    for e in entries:
        if not isinstance(e, str) or not e:
            continue
        for r in ordered:
            if e == r:
                rooted.append("")
                break
            if e.startswith(r + "."):
                rooted.append(e[len(r) + 1:])
                break
        else:
            short.append(e)
    return rooted, short


_PLACEHOLDERS = ("{i}", "{j}")


def _canonical_number(seg: str) -> bool:
    """Whether ``seg`` is how a layer or copy index is written in a path (``3``, not ``03``)."""
    return seg.isascii() and seg.isdigit() and str(int(seg)) == seg


#: a whole path segment that is a canonical number (what _canonical_number accepts)
_NUMBER_SEGMENT = re.compile(r"(?:^|(?<=\.))(0|[1-9][0-9]*)(?=\.|\Z)")


def _shapes(entries) -> dict:
    """Entries grouped by shape (their segments with every index-like number written ``#``) -> the
    numbers of each entry, in order. A long list has few shapes: templates are matched per shape."""
    out: dict[tuple, list] = {}
    find, sub = _NUMBER_SEGMENT.findall, _NUMBER_SEGMENT.sub
    for e in entries:
        numbers = tuple(find(e))
        shape = tuple((sub("#", e) if numbers else e).split("."))
        out.setdefault(shape, []).append(numbers)
    return out


class _SkipIndex:
    """A skip list (entries under the text-tower root, made relative to it, and short entries) by shape."""

    def __init__(self, rooted: list, short: list):
        self.whole_tower = "" in rooted
        self.rooted = _shapes(r for r in rooted if r)
        self.short = _shapes(short)
        self.memo: dict = {}  # (shape, number positions of i and j, literal checks) -> constraints


def _match_shape(shape: tuple, numbers: list, segs: list, offset: int, memo: dict) -> tuple:
    """The (i, j) of each entry of ``shape`` that matches the template ``segs`` from ``offset`` on, as
    (the copies j matched on any layer, {layer i: its copies j}); j None stands for every copy. A
    template's {i}/{j} take canonical numbers and its literals match exactly; a whole group of entries
    is matched at once, and each distinct projection of the group is computed once."""
    slots = {"{i}": [], "{j}": []}  # positions among the entry's numbers that fix i or j
    literal = []  # (position among the numbers, text the template has there)
    n = 0
    for s, t in zip(shape, segs[offset:offset + len(shape)]):
        if t in slots:
            if s != "#":
                return (set(), {})
            slots[t].append(n)
        elif s == "#":
            literal.append((n, t))
        elif s != t:
            return (set(), {})
        if s == "#":
            n += 1
    key = (shape, tuple(slots["{i}"]), tuple(slots["{j}"]), tuple(literal))
    if key in memo:
        return memo[key]
    any_layer: set = set()
    by_layer: dict = {}
    for nums in numbers:
        if literal and any(nums[k] != t for k, t in literal):
            continue
        iv = {nums[k] for k in slots["{i}"]}
        jv = {nums[k] for k in slots["{j}"]}
        if len(iv) > 1 or len(jv) > 1:
            continue
        j = int(jv.pop()) if jv else None
        if iv:
            by_layer.setdefault(int(iv.pop()), set()).add(j)
        else:
            any_layer.add(j)
    memo[key] = result = (any_layer, by_layer)
    return result


def _skip_constraints(template: str, index: _SkipIndex, canon: str) -> list | None:
    """The (i, j) pairs (None: any) whose module path the skip list matches, from the path template,
    as parts of the form :func:`_match_shape` returns.

    Same rules as a concrete path: entries under the canonical root match the path relative to it
    when equal or a parent of it; short entries match when equal, a parent, or a suffix at a module
    boundary. None when a placeholder shares a segment with other text (then paths are expanded).
    """
    segs = template.split(".")
    if any(p in s and s != p for s in segs for p in _PLACEHOLDERS):
        return None
    out = []
    canon_segs = canon.split(".")
    if segs[:len(canon_segs)] == canon_segs and len(segs) > len(canon_segs):
        rel = segs[len(canon_segs):]
        if index.whole_tower:
            out.append(({None}, {}))
        for shape, numbers in index.rooted.items():
            if len(shape) <= len(rel):
                out.append(_match_shape(shape, numbers, rel, 0, index.memo))
    for shape, numbers in index.short.items():
        if len(shape) > len(segs):
            continue
        for offset in {0, len(segs) - len(shape)}:
            out.append(_match_shape(shape, numbers, segs, offset, index.memo))
    return out


def _copies_matched(parts: list, indices, count: int, repeat: int) -> int:
    """Module copies (layer x numbered copy) that the constraint parts select, over ``indices``."""
    any_layer = set().union(*(a for a, _ in parts))
    if None in any_layer:
        return count * repeat
    common = {j for j in any_layer if 0 <= j < repeat}
    by_layer: dict[int, set] = {}
    for _, per_layer in parts:
        if len(per_layer) <= count:  # the part names fewer layers than the group has: look each up
            for i, js in per_layer.items():
                if i in indices:
                    by_layer.setdefault(i, set()).update(js)
        else:
            for i in indices:
                js = per_layer.get(i)
                if js:
                    by_layer.setdefault(i, set()).update(js)
    total = (count - len(by_layer)) * len(common)
    for js in by_layer.values():
        total += repeat if None in js else len(common | {j for j in js if 0 <= j < repeat})
    return total


def _skipped_quantizable(classes, model_mods, entries, roots) -> int:
    """Quantizable weights a 4-bit load keeps in 16 bit because the skip list names their module.

    Each module's path template is matched against the list once; layers and numbered copies
    are counted from the constraints the match leaves, never by writing out every path.
    """
    rooted, short = _split_entries(entries, roots)
    canon = roots[0]
    index = _SkipIndex(rooted, short)
    total = 0
    for count, indices, mods in _groups(model_mods, classes):
        for m in mods:
            if not m.quantizable:
                continue
            template = m.path.rsplit(".", 1)[0] if m.kind == "parameter" else m.path  # a bare parameter's module
            constraints = _skip_constraints(template, index, canon)
            if constraints is None:
                matches = _skip_matcher(rooted, short, canon)
                layers = indices if indices is not None else (None,)
                copies = sum(
                    1 for i in layers for p in m.paths(i)
                    if matches(p.rsplit(".", 1)[0] if m.kind == "parameter" else p)
                )
            else:
                copies = _copies_matched(constraints, indices if indices is not None else (0,), count, m.repeat)
            total += copies * (m.weight_params // m.repeat)
    return total


def _skip_matcher(rooted: list, short: list, canon: str):
    """A predicate over concrete module paths (used when a path template cannot be matched as a whole)."""

    def matches(path: str) -> bool:
        rel = path[len(canon) + 1:] if path.startswith(canon + ".") else None
        if rel is not None:
            for r in rooted:
                if r == "" or rel == r or rel.startswith(r + "."):
                    return True
        for e in short:
            if path == e or path.endswith("." + e) or path.startswith(e + "."):
                return True
        return False

    return matches


def _layer_classes(family: Family, env: dict, n_layers: int) -> list[tuple[IndexSet, dict]]:
    """The distinct layers of the model: (their indices, their attributes), in order of first index."""
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


def resolve_model(
    family: Family,
    root: Mapping,
    text: Mapping,
    *,
    model_type: str | None,
    warnings: Iterable[str] = (),
    source: str = "",
    checkpoint_bytes: int | None = None,
    checkpoint_origin: str | None = None,
) -> ModelSpec:
    """Resolve ``family`` on a config (``root``: whole config, ``text``: its text view)."""
    warns = list(warnings)
    origins: dict[str, FactOrigin] = {}
    facts = _resolve_facts(family, root, text, warns, origins)
    n_layers = facts.get(family.layer_count)
    least = next((r.min for r in family.facts if r.name == family.layer_count and r.min is not None), 1)
    if not isinstance(n_layers, int) or isinstance(n_layers, bool) or n_layers < least:
        raise ConfigError(f"{family.layer_count} must be a positive integer, got {n_layers!r}")

    env = dict(facts)
    classes = []
    try:
        for indices, values in _layer_classes(family, env, n_layers):
            lenv = {**env, **values}
            label = f" (layer {indices[0]})"
            mods = tuple(m for m in (_module(r, lenv, label) for r in family.layer_modules) if m is not None)
            classes.append(LayerClass(indices=indices, attributes=MappingProxyType(values), modules=mods))
        model_mods = tuple(m for m in (_module(r, env, "") for r in family.model_modules) if m is not None)
    except EvaluationError as e:  # a module's shape cannot be computed from these values
        raise ConfigError(f"the config's values do not fit the family's modules: {e}") from None

    by_group: dict[str, int] = {}
    quantizable = 0
    linear_quantizable = 0
    total = 0
    for count, _, mods in _groups(model_mods, classes):
        for m in mods:
            by_group[m.group] = by_group.get(m.group, 0) + count * m.params
            total += count * m.params
            if m.quantizable:
                quantizable += count * m.weight_params
                if m.kind == "linear":
                    linear_quantizable += count * m.weight_params
    layers_params = sum(lc.count * lc.params for lc in classes)
    largest_module = max((m.params // m.repeat for _, _, mods in _groups(model_mods, classes) for m in mods), default=0)
    largest = max(classes, key=lambda lc: lc.params, default=None)
    largest_q = largest_lq = 0
    for m in largest.modules if largest is not None else ():
        if m.quantizable:
            largest_q += m.weight_params
            if m.kind == "linear":
                largest_lq += m.weight_params
    skip = facts.get(family.skip_modules_fact) if family.skip_modules_fact else None
    skipped = _skipped_quantizable(classes, model_mods, skip, family.path_roots) if skip else 0
    for rule in family.warning_rules:
        if rule.when.evaluate(facts):
            warns.append(render(rule.message, facts))
    if checkpoint_bytes is not None and not 0 <= checkpoint_bytes <= 2**60:
        raise ConfigError(f"the checkpoint's size {_short_repr(checkpoint_bytes)} bytes is not plausible (from {checkpoint_origin})")
    if checkpoint_bytes is not None and checkpoint_bytes > 2 * total:
        extra = checkpoint_bytes - 2 * total
        warns.append(
            f"the checkpoint holds {extra / 2**30:.2f} GiB more than the text tower's 16-bit weights "
            f"(vision/audio towers or modules the family does not model), from {checkpoint_origin}; "
            "they are added to the weights"
        )
    inventory = Inventory(
        params_total=total, quantizable_params=quantizable, linear_quantizable_params=linear_quantizable,
        non_quantizable_params=total - quantizable, skipped_quantizable_params=skipped,
        checkpoint_bytes=checkpoint_bytes, num_layers=n_layers, layers_params=layers_params,
        largest_layer_params=largest.params if largest is not None else 0,
        largest_layer_quantizable_params=largest_q, largest_layer_linear_quantizable_params=largest_lq,
        largest_module_params=largest_module,
    )
    return ModelSpec(
        family=family.name, family_file=family.file, model_type=model_type, facts=MappingProxyType(facts),
        num_layers=n_layers, layer_classes=tuple(classes), model_modules=model_mods,
        warnings=tuple(warns), source=source,
        peft_target_parameters=family.peft_target_parameters.get(model_type, MappingProxyType({})),
        rules=family, fact_origins=MappingProxyType(origins), inventory=inventory,
        params_by_group=MappingProxyType(dict(sorted(by_group.items()))),
    )


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v
