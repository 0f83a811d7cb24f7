"""Family files: loading, inheritance (``extends``) and compilation.

A family file is validated against ``family-1.schema.json``; its entries merge
by name over the parent family, and a family's stack overlays (``families/stacks/<stack>/<family>.yaml``,
the facts one training stack needs) merge over its own facts; every expression is checked against the names
it may use (earlier facts, ``i`` and earlier attributes, ...) before the family
is used. Nothing here knows any model family: all of that is in the files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from vramwise.errors import FileFormatError
from vramwise.rules.expr.language import Expression, compile_expression, template_problem
from vramwise.rules.graph import dependency_order
from vramwise.models.plan import analyse
from vramwise.rules.datafiles import DataFile, json_path
from vramwise.models.stack_manifest import MANIFEST_PATH, stack_manifest

__all__ = ["Family", "FactRule", "AttributeRule", "ModuleRule", "LoraPart", "ConfigWarningRule", "compile_family", "describe_alias_list"]

_TYPES = ("int", "number", "bool", "string", "list", "any")


@dataclass(frozen=True)
class Src:
    """A merged value and where it was written."""

    value: Any
    df: DataFile
    parts: tuple

    def where(self) -> str:
        return self.df.where(self.parts)


@dataclass(frozen=True)
class Alias:
    from_root: bool
    path: tuple
    reduce: str | None
    zero_as_null: bool = False  # a 0 read here counts as null (the reference reads 0 as it reads a missing value)

    @property
    def name(self) -> str:
        return ("/" if self.from_root else "") + ".".join(self.path)


@dataclass(frozen=True)
class FactRule:
    name: str
    aliases: tuple
    type: str
    min: float | None
    has_default: bool
    default: Any
    derive: Expression | None
    where: str
    description: str
    unit: str = ""
    max: float | None = None
    items: str | None = None  # element type of a list fact
    max_length: int | None = None  # of a list or string fact
    truncate: bool = False  # a number with a fraction is read as int() reads it (the reference does), with a warning


@dataclass(frozen=True)
class AttributeRule:
    name: str
    expr: Expression
    per_layer: bool  # depends on i
    description: str
    unit: str = ""


@dataclass(frozen=True)
class LoraPart:
    target: str
    in_features: Expression
    out_features: Expression
    count: Expression | None
    explicit_only: bool


@dataclass(frozen=True)
class ModuleRule:
    name: str
    kind: str
    group: str
    path: str
    shape: tuple  # of Expression
    bias: Expression
    when: Expression | None
    quantizable: bool
    lora: tuple  # of LoraPart; empty: answers to its own name only (if linear)
    where: str
    repeat: Expression | None = None
    input: str | None = None  # the tensor it reads, named where modules of a layer share one


@dataclass(frozen=True)
class ConfigWarningRule:
    """A warning of a family file about a config: its condition over the facts and its message template."""

    when: Expression
    message: str


@dataclass(frozen=True)
class Family:
    name: str
    file: str
    description: str
    source: str
    model_types: tuple
    abstract: bool
    fallback: bool
    parents: tuple  # chain of ancestor names, nearest first
    facts: tuple  # of FactRule, in resolution order
    layer_count: str
    attributes: tuple  # of AttributeRule
    layer_modules: tuple  # of ModuleRule
    model_modules: tuple  # of ModuleRule
    path_roots: tuple = ("model",)
    skip_modules_fact: str | None = None
    warning_rules: tuple = ()
    # PEFT's rewrite of LoRA targets onto (fused) parameters, per model type it applies to:
    # model type -> {target name: parameter name suffix}; targets fused into one parameter multiply its rank
    peft_target_parameters: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    examples: tuple = field(default=(), repr=False)  # raw example dicts
    # raw `reference:` mapping (what the exactness tests build); not inherited, None when absent
    reference: Mapping[str, Any] | None = field(default=None, repr=False)
    # the atoms through which per-layer attributes depend on the layer index (None: visit every layer)
    layer_atoms: Any = field(default=None, repr=False, compare=False)

    @property
    def fact_names(self) -> frozenset:
        return frozenset(f.name for f in self.facts)

    @property
    def attribute_names(self) -> frozenset:
        return frozenset(a.name for a in self.attributes)


_MERGED_SECTIONS = (("facts",), ("layers", "attributes"), ("layers", "modules"), ("model_modules",))


def _merge_entries(target: dict, block: dict, df: DataFile, sec: tuple) -> None:
    """Merge one file's entries of section ``sec`` over ``target`` (entry -> field -> Src), field by field."""
    for entry, spec in block.items():
        if spec is None:
            target.pop(entry, None)
            continue
        fields = target.setdefault(entry, {})
        # a fact's default and derive are one rule: a child that sets one replaces both
        for pair in (("default", "derive"), ("derive", "default")):
            if pair[0] in spec and pair[1] not in spec:
                fields.pop(pair[1], None)
        for fname, fval in spec.items():
            fields[fname] = Src(fval, df, sec + (entry, fname))
        fields["__entry__"] = Src(spec, df, sec + (entry,))


def _no_stack_facts(df: DataFile) -> None:
    """A family file holds the facts of the model only: a stack's facts (named by its prefix in
    formulas/stacks.yaml) belong in the stack's overlay, families/stacks/<stack>/<family>.yaml."""
    manifest = stack_manifest()
    for entry in (df.data.get("facts") or {}):
        stack = manifest.stack_of_fact(entry)
        if stack is not None:
            raise FileFormatError(
                f"{df.key_where(('facts', entry))}: {json_path(('facts', entry))}: fact {entry!r} belongs to the "
                f"{stack.name} stack (prefix {stack.facts_prefix!r}, {MANIFEST_PATH}): "
                f"write it in families/stacks/{stack.name}/{df.data.get('family')}.yaml")


def _merge(raw: dict[str, DataFile], name: str, seen: tuple = (), overlays: Callable | None = None) -> dict:
    """Merged view of family ``name``: section -> entry -> field -> Src (the family's stack overlays,
    ``overlays(name)``, merged after its own file)."""
    df = raw[name]
    data = df.data
    _no_stack_facts(df)
    parent_name = data.get("extends")
    if name in seen:
        chain = " -> ".join(seen + (name,))
        raise FileFormatError(df.problem(("extends",), f"inheritance cycle: {chain}"))
    if parent_name is not None:
        if parent_name not in raw:
            raise FileFormatError(
                df.problem(("extends",), f"unknown family {parent_name!r} (known: {', '.join(sorted(raw))})")
            )
        merged = _merge(raw, parent_name, seen + (name,), overlays)
        merged = {k: ({e: dict(f) for e, f in v.items()} if k in _MERGED_SECTIONS else v) for k, v in merged.items()}
        merged["parents"] = (parent_name,) + merged["parents"]
    else:
        merged = {sec: {} for sec in _MERGED_SECTIONS}
        merged["parents"] = ()
        merged["count"] = None
        merged["warnings"] = ()
    for sec in _MERGED_SECTIONS:
        block = data
        for key in sec:
            block = (block or {}).get(key) if isinstance(block, dict) else None
        if not block:
            continue
        _merge_entries(merged[sec], block, df, sec)
    for overlay in (overlays(name) if overlays is not None else ()):
        _merge_entries(merged[("facts",)], overlay.data["facts"], overlay, ("facts",))
    count = (data.get("layers") or {}).get("count")
    if count is not None:
        merged["count"] = Src(count, df, ("layers", "count"))
    for key in ("path_roots", "skip_modules_fact"):
        if key in data:
            merged[key] = Src(data[key], df, (key,))
        else:
            merged.setdefault(key, None)
    # PEFT's rewrite merges field by field down the chain; the model types it applies to are each file's own
    merged["peft"] = dict(merged.get("peft") or {})
    merged["peft"].pop("model_types", None)
    for fname, fval in (data.get("peft") or {}).items():
        merged["peft"][fname] = Src(fval, df, ("peft", fname))
    # warnings accumulate down the inheritance chain
    merged["warnings"] = tuple(merged.get("warnings", ())) + tuple(
        Src(w, df, ("warnings", k)) for k, w in enumerate(data.get("warnings", ()))
    )
    return merged


def _expr(src: Src | None, allowed, what: str) -> Expression | None:
    if src is None:
        return None
    return compile_expression(src.value, allowed=allowed, df=src.df, parts=src.parts, what=what)


def _compile_module(name: str, fields: dict, allowed, in_layer: bool) -> ModuleRule:
    entry: Src = fields["__entry__"]
    missing = [k for k in ("kind", "group", "path", "shape") if k not in fields]
    if missing:
        raise FileFormatError(entry.df.problem(entry.parts, f"module {name!r} lacks {', '.join(missing)} (after inheritance)"))
    path = fields["path"].value
    if ("{j}" in path) != ("repeat" in fields):
        raise FileFormatError(fields["path"].df.problem(fields["path"].parts, "a path holds {j} exactly when the module sets repeat"))
    if in_layer and "{i}" not in path:
        raise FileFormatError(fields["path"].df.problem(fields["path"].parts, "a layer module path must contain {i}"))
    if not in_layer and "{i}" in path:
        raise FileFormatError(fields["path"].df.problem(fields["path"].parts, "a model module path must not contain {i}"))
    shape_src: Src = fields["shape"]
    shape = tuple(
        compile_expression(v, allowed=allowed, df=shape_src.df, parts=shape_src.parts + (k,), what="shape")
        for k, v in enumerate(shape_src.value)
    )
    kind = fields["kind"].value
    if kind == "linear" and len(shape) != 2:
        raise FileFormatError(shape_src.df.problem(shape_src.parts, "a linear module has a 2-D shape [out, in]"))
    bias = _expr(fields.get("bias"), allowed, "bias") or compile_expression(False, allowed=())
    when = _expr(fields.get("when"), allowed, "when")
    quant = fields["quantizable"].value if "quantizable" in fields else kind == "linear"
    parts = []
    if "lora" in fields:
        lsrc: Src = fields["lora"]
        for k, part in enumerate(lsrc.value):
            base = lsrc.parts + (k,)
            parts.append(
                LoraPart(
                    target=part["target"],
                    in_features=compile_expression(part["in"], allowed=allowed, df=lsrc.df, parts=base + ("in",)),
                    out_features=compile_expression(part["out"], allowed=allowed, df=lsrc.df, parts=base + ("out",)),
                    count=compile_expression(part["count"], allowed=allowed, df=lsrc.df, parts=base + ("count",))
                    if "count" in part else None,
                    explicit_only=bool(part.get("explicit_only", False)),
                )
            )
    return ModuleRule(
        name=name, kind=kind, group=fields["group"].value, path=path, shape=shape, bias=bias, when=when,
        quantizable=bool(quant), lora=tuple(parts), where=entry.where(),
        repeat=_expr(fields.get("repeat"), allowed, "repeat"),
        input=fields["input"].value if "input" in fields else None,
    )


def _compile(name: str, raw: dict[str, DataFile], overlays: Callable | None = None) -> Family:
    df = raw[name]
    data = df.data
    merged = _merge(raw, name, overlays=overlays)
    facts: list[FactRule] = []
    known: set[str] = set(merged[("facts",)])  # a derivation may read any other fact (sorted below)
    for fname, fields in merged[("facts",)].items():
        entry: Src = fields["__entry__"]
        aliases = []
        for a in (fields["aliases"].value if "aliases" in fields else []):
            spec = a if isinstance(a, dict) else {"path": a}
            p = spec["path"]
            aliases.append(Alias(from_root=p.startswith("/"), path=tuple(p.lstrip("/").split(".")), reduce=spec.get("reduce"),
                                 zero_as_null=bool(spec.get("zero_as_null", False))))
        dsrc = fields.get("derive")
        derive = _expr(dsrc, known - {fname}, "derive") if dsrc is not None and dsrc.value is not None else None
        ftype = fields["type"].value if "type" in fields else "any"
        if "truncate" in fields and fields["truncate"].value and not (
                ftype == "int" or (ftype == "list" and "items" in fields and fields["items"].value == "int")):
            tsrc: Src = fields["truncate"]
            raise FileFormatError(tsrc.df.problem(tsrc.parts, "truncate applies to an int fact or a list of ints"))
        facts.append(
            FactRule(
                name=fname, aliases=tuple(aliases), type=ftype,
                min=fields["min"].value if "min" in fields else None,
                max=fields["max"].value if "max" in fields else None,
                items=fields["items"].value if "items" in fields else None,
                max_length=fields["max_length"].value if "max_length" in fields else None,
                truncate=bool(fields["truncate"].value) if "truncate" in fields else False,
                has_default="default" in fields, default=fields["default"].value if "default" in fields else None,
                derive=derive, where=entry.df.key_where(entry.parts),
                description=fields["description"].value if "description" in fields else "",
                unit=fields["unit"].value if "unit" in fields else "",
            )
        )
    # Facts are read from the config and derived in dependency order (declaration order where free).
    by_name = {f.name: f for f in facts}

    def fact_cycle(trail: tuple) -> FileFormatError:
        return FileFormatError(f"{by_name[trail[-1]].where}: $: fact derivation cycle: {' -> '.join(trail)}")

    facts = [by_name[n] for n in dependency_order(
        by_name, lambda n: (by_name[n].derive.names & known) if by_name[n].derive is not None else (), fact_cycle)]
    count_src = merged["count"]
    abstract = bool(data.get("abstract", False))
    if count_src is None and not abstract:
        raise FileFormatError(df.problem(("layers",), "layers.count is not set (nor inherited)"))
    if count_src is not None and count_src.value not in known:
        raise FileFormatError(count_src.df.problem(count_src.parts, f"layers.count names unknown fact {count_src.value!r}"))
    # Attributes may use facts, i and each other; they are evaluated in dependency order
    # (a child's new attribute can feed an inherited one), and a cycle is a load error.
    attr_fields = merged[("layers", "attributes")]
    attr_names = set(attr_fields)
    compiled_attrs: dict[str, tuple[Expression, str]] = {}
    for aname, fields in attr_fields.items():
        entry = fields["__entry__"]
        if aname in known or aname == "i":
            raise FileFormatError(entry.df.problem(entry.parts, f"attribute {aname!r} shadows a fact"))
        if "expr" not in fields:
            raise FileFormatError(entry.df.problem(entry.parts, f"attribute {aname!r} has no expr"))
        expr = _expr(fields["expr"], known | attr_names | {"i"}, "attribute")
        compiled_attrs[aname] = (expr, fields["description"].value if "description" in fields else "",
                                 fields["unit"].value if "unit" in fields else "")
    def attribute_cycle(trail: tuple) -> FileFormatError:
        return FileFormatError(f"{compiled_attrs[trail[-1]][0].where}: $.layers.attributes: attribute cycle: {' -> '.join(trail)}")

    attrs: list[AttributeRule] = []
    per_layer: set[str] = set()
    for aname in dependency_order(compiled_attrs, lambda a: compiled_attrs[a][0].names & attr_names, attribute_cycle):
        expr, desc, unit = compiled_attrs[aname]
        if "i" in expr.names or expr.names & per_layer:
            per_layer.add(aname)
        attrs.append(AttributeRule(aname, expr, aname in per_layer, desc, unit))
    layer_allowed = known | attr_names
    layer_modules = tuple(
        _compile_module(m, f, layer_allowed, True) for m, f in merged[("layers", "modules")].items()
    )
    model_modules = tuple(_compile_module(m, f, known, False) for m, f in merged[("model_modules",)].items())
    for w in merged["warnings"]:
        problem = template_problem(w.value["message"], known)
        if problem:
            raise FileFormatError(w.df.problem(w.parts + ("message",), problem))
    warning_rules = tuple(
        ConfigWarningRule(
            when=compile_expression(w.value["when"], allowed=known, df=w.df, parts=w.parts + ("when",)),
            message=w.value["message"],
        )
        for w in merged["warnings"]
    )
    skip_src = merged["skip_modules_fact"]
    if skip_src is not None and skip_src.value not in known:
        raise FileFormatError(skip_src.df.problem(skip_src.parts, f"unknown fact {skip_src.value!r}"))
    roots = merged["path_roots"]
    peft = merged["peft"]
    peft_targets: dict = {}
    if "model_types" in peft:
        types_src: Src = peft["model_types"]
        if "target_parameters" not in peft:
            raise FileFormatError(types_src.df.problem(types_src.parts, "peft.model_types needs target_parameters (here or inherited)"))
        own = set(data.get("model_types", ()))
        foreign = [t for t in types_src.value if t not in own]
        if foreign and not data.get("fallback", False):
            raise FileFormatError(types_src.df.problem(
                types_src.parts, f"PEFT model types {foreign} are not served by this family (model_types: {sorted(own)})"))
        targets = MappingProxyType(dict(peft["target_parameters"].value))
        peft_targets = {mt: targets for mt in types_src.value}
    return Family(
        name=name, file=df.path, description=data["description"], source=data["source"],
        model_types=tuple(data.get("model_types", ())), abstract=abstract, fallback=bool(data.get("fallback", False)),
        parents=merged["parents"], facts=tuple(facts), layer_count=count_src.value if count_src else "",
        attributes=tuple(attrs), layer_modules=layer_modules, model_modules=model_modules,
        path_roots=tuple(roots.value) if roots is not None else ("model",),
        skip_modules_fact=skip_src.value if skip_src is not None else None,
        warning_rules=warning_rules,
        peft_target_parameters=MappingProxyType(peft_targets),
        examples=tuple(data.get("examples", ())),
        reference=data.get("reference"),
        layer_atoms=analyse(attrs),
    )


def compile_family(name: str, files: Mapping[str, DataFile], overlays: Callable | None = None) -> Family:
    """Compile family ``name``; ``files`` maps family names to validated files (loaded on access);
    ``overlays(family)``, when given, returns the family's stack overlays (loaded files), merged after
    the family's own file (:meth:`~vramwise.models.family_index.FamilyFiles.overlays`)."""
    return _compile(name, files, overlays)


def describe_alias_list(rule: FactRule) -> str:
    return ", ".join(a.name for a in rule.aliases) or "(no aliases)"

