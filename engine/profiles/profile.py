"""Memory profiles: a folder of formula files evaluated on a resolved model.

``formulas/<profile>/profile.yaml`` names the formula files in order (its own, and those of
``formulas/shared`` that several profiles use), the facts and layer attributes the profile needs from every family, the LoRA target conventions and
which formulas are the reported components. Formulas are checked and ordered
by their dependencies when the profile is loaded; an estimate evaluates each
one once (layer-scope formulas once per layer class).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from vramwise.errors import FileFormatError, SettingsError
from vramwise.rules.expr.language import _FIELD, Expression, LayerValues, compile_expression, render, round_bytes, template_problem, type_tag
from vramwise.rules.graph import dependency_order
from vramwise.models.model import AGGREGATE_NAMES
from vramwise.rules.expr.codegen import Program, dynamic_ids, stored_program
from vramwise.profiles.env_names import LAYER_VALUES, MODEL_TYPE
from vramwise.profiles.settings import DERIVED_FROM, METHODS, RELEASE_SETTINGS, SETTING_NAMES, release_key
from vramwise.rules.datafiles import DataFile, json_path

__all__ = ["Profile", "Formula", "Table", "Dated", "Overlay", "build_profile", "check_inputs", "AGGREGATE_NAMES", "round_bytes"]

N_GPUS = "n_gpus"
#: A layer-scope name every profile may read: the indices of the layers of the formula's layer class (0 first), so
#: that a formula may count the class's layers in a range (``count_at_least(layer_indices, first)``).
LAYER_INDICES = "layer_indices"




@dataclass(frozen=True)
class Formula:
    id: str
    scope: str
    expr: Expression
    unit: str
    description: str
    source: str
    component: str  # the file's component name


@dataclass(frozen=True)
class Table:
    name: str
    key: str
    entries: Mapping[str, float]
    default: float | None
    unknown_warning: str | None
    where: str
    unit: str = ""
    description: str = ""


@dataclass(frozen=True)
class Dated:
    """A value that changes by release: ``values`` holds (release, value) in ascending order, each value
    in force from its release until the next one (OpenFisca's dated parameters)."""

    name: str
    by: str  # the release setting (vllm_version)
    values: tuple  # ((release key, release text, value), ...), ascending
    where: str
    unit: str = ""
    description: str = ""

    def in_force(self, release: str) -> tuple[str, Any]:
        """(the release the value dates from, the value) in force at ``release``."""
        key = release_key(release)
        chosen = None
        for k, text, value in self.values:
            if k > key:
                break
            chosen = (text, value)
        if chosen is None:
            raise SettingsError(f"{self.by} {release}: {self.name} has no value before {self.values[0][1]} ({self.where})")
        return chosen


@dataclass(frozen=True)
class WarningRule:
    """A warning of a formula file: its condition, its message template and the names it shows."""

    when: Expression
    message: str
    shown: frozenset  # names of the message's placeholders
    dynamic: bool  # reads something that batch or sequence changes (evaluated per estimate, when asked)
    blocks: bool = False  # the stack refuses or fails the run when the condition holds (``blocks: true``)

    def render(self, env: Mapping[str, Any], units: Mapping[str, str]) -> str:
        values = {}
        for name in self.shown:
            v = env.get(name)
            if units.get(name) == "bytes" and isinstance(v, (int, float)):
                try:
                    values[name] = f"{v / 2**30:,.2f} GiB"
                except OverflowError:  # an integer beyond any float: shown as it is
                    values[name] = f"{v} bytes"
            elif units.get(name) == "params" and isinstance(v, (int, float)) and (isinstance(v, int) or math.isfinite(v)):
                values[name] = f"{round(v):,}"
            elif isinstance(v, LayerValues):
                values[name] = ", ".join(str(x) for _, x in v)
            elif isinstance(v, (tuple, list)):  # a list fact (the kernels a class runs): its items, comma-separated
                values[name] = ", ".join(str(x) for x in v)
            else:
                values[name] = v
        return render(self.message, values)


@dataclass(frozen=True)
class Constant:
    """A named constant of a formula file, with where it is written."""

    name: str
    value: float
    unit: str
    description: str
    source: str
    where: str


@dataclass(frozen=True, eq=False)
class Profile:
    name: str
    file: str
    description: str
    source: str
    model_inputs: tuple
    layer_inputs: tuple
    default_targets: tuple
    target_sets: Mapping[str, tuple]
    lora_convention: str  # "unsloth" or "peft"
    methods: tuple  # the methods the profile models
    families: tuple | None  # the only families it is for (None: those chosen by model type, and the fallback)
    summary: str  # one line: the training stack the profile models
    further_gpu_share: float  # GPU selection: share of each further GPU's free memory that counts
    report: tuple  # ((text, methods or None, condition over the figures or None), ...): lines the command line prints
    components: Mapping[str, str]  # component -> formula id
    total: str
    min_per_gpu: str
    trainable_params: str
    figures: Mapping[str, str]
    phases: Mapping[str, str]  # phase name -> formula id of its peak (empty: the profile has no phases)
    constants: Mapping[str, float]
    constant_info: Mapping[str, "Constant"]
    tables: tuple
    formulas: tuple  # dependency order
    dated: tuple = ()  # of Dated: values by release, chosen with the static values
    dynamic: frozenset = frozenset()  # ids of the formulas that depend on batch or sequence
    warning_rules: tuple = ()  # of WarningRule, from the formula files
    settings_read: frozenset = frozenset()  # the settings its formulas, tables and warnings read
    strategy: str | None = None  # the multi-GPU strategy whose formulas were added (None: one GPU)
    methods_note: str = ""  # under a strategy: why the methods missing from ``methods`` are not modelled
    serving: Mapping[str, Any] | None = None  # a serving profile: required settings, the figures its answers read
    compiled: str | None = None  # formula id of the flag "this estimate models a step under torch.compile"
    host: str | None = None  # formula id of the host memory a machine needs (strategies)
    rank_groups: tuple = ()  # ((role, count id, total id, {component: id}), ...): ranks that hold different amounts
    other_profile: tuple | None = None  # (profile, ratio): the other stack's profile whose figure is noted beyond ratio
    absent: tuple = ()  # ((component, phase or None, why), ...): why a component is 0 in the table of the peak phase
    graph_layer_inputs: tuple = ()  # the layer inputs a graph template reads layer by layer (LAYER_VALUES)
    _programs: dict = field(default_factory=dict, repr=False, compare=False)  # type signature -> Program
    _families_checked: dict = field(default_factory=dict, repr=False, compare=False)  # id -> Family

    def absent_reason(self, component: str, phase: str | None) -> str | None:
        """Why ``component`` is 0 when the peak is in ``phase`` (profile data: ``absent``), or None."""
        for name, at in ((component, phase), (component, None)):
            for c, p, why in self.absent:
                if (c, p) == (name, at):
                    return why
        return None

    def serves(self, family) -> bool:
        """Whether the profile is meant for ``family``."""
        if self.families is not None:
            return family.name in self.families
        return not family.abstract and (bool(family.model_types) or family.fallback)

    def check_family(self, family) -> None:
        """Raise when ``family`` lacks a fact or layer attribute this profile needs (checked once per family)."""
        if id(family) in self._families_checked:
            return
        if not self.serves(family):
            raise SettingsError(
                f"profile {self.name} is for {', '.join(self.families or ('families chosen by model type',))}, "
                f"not family {family.name}"
            )
        problem = check_inputs(self, family)
        if problem:
            raise FileFormatError(problem)
        self._families_checked[id(family)] = family

    def expand_targets(self, targets: tuple | None) -> tuple[frozenset, frozenset]:
        """(every target name, the names given explicitly): keywords such as ``all-linear`` expand
        to the names they stand for but do not count as naming them explicitly."""
        out: set[str] = set()
        explicit: set[str] = set()
        for t in targets if targets is not None else self.default_targets:
            key = t.lower()
            if key in self.target_sets:
                out.update(self.target_sets[key])
            else:
                out.add(t)
                explicit.add(t)
        return frozenset(out), frozenset(explicit)

    def check_required(self, settings: Mapping[str, Any]) -> None:
        """Raise :class:`SettingsError` when a serving profile lacks a setting it cannot do without."""
        for rule in (self.serving or {}).get("requires", ()):
            if all(settings.get(name) is None for name in rule["settings"]):
                raise SettingsError(f"profile {self.name}: {rule['message']}")

    @property
    def figure_units(self) -> dict:
        """The unit of each figure (by its name in ``figures``)."""
        units = {f.id: f.unit for f in self.formulas}
        return {name: units.get(fid, "bytes") for name, fid in self.figures.items()}

    @property
    def ratio_ids(self) -> frozenset:
        """Figures whose unit is a ratio (a concurrency, a share): reported as they are, not rounded to bytes."""
        return frozenset(f.id for f in self.formulas if f.unit == "ratio" and f.id in self.figures.values())

    @property
    def reported(self) -> frozenset:
        """Formula ids reported as components, figures or phases (rounded to whole bytes when evaluated)."""
        out = frozenset(self.components.values()) | frozenset(self.figures.values()) | frozenset(self.phases.values())
        out -= self.ratio_ids
        if self.host is not None:
            out |= {self.host}
        for _, count, total, comps in self.rank_groups:
            out |= {count, total} | frozenset(comps.values())
        return out

    def static_env(self, spec, names: Mapping[str, Any], lora, warnings: list[str]) -> tuple[dict, list[dict]]:
        """Evaluate every formula that does not depend on batch or sequence, formula by formula.

        ``names``: the settings other than batch and sequence; ``lora`` holds the adapter sums of
        the chosen targets. Returns the model-level names and one dict per layer class.
        """
        env: dict[str, Any] = dict(names)
        env.update(spec.aggregates)
        env.update(lora.formula_names())
        env[N_GPUS] = 1
        env[MODEL_TYPE] = spec.model_type
        for name in self.model_inputs:
            env[name] = spec.facts[name]
        env.update(self.constants)
        classes = spec.layer_classes
        layer_envs = [{**lc.attributes, LAYER_INDICES: lc.indices} for lc in classes]
        for name in self.layer_inputs:
            env[name] = LayerValues((lc.count, lc.attributes[name]) for lc in classes)
        if self.graph_layer_inputs:  # what a graph template reads of each layer, layer by layer
            per_layer = []
            for name in self.graph_layer_inputs:
                values = [None] * spec.num_layers
                for lc in classes:
                    for i in lc.indices:
                        values[i] = lc.attributes[name]
                per_layer.append((name, tuple(values)))
            env[LAYER_VALUES] = tuple(per_layer)
        for t in self.tables:
            key = env[t.key]
            if key in t.entries:
                env[t.name] = t.entries[key]
            elif t.default is not None:
                env[t.name] = t.default
                if t.unknown_warning:
                    warnings.append(render(t.unknown_warning, {"key": key, "default": t.default}))
            else:
                raise SettingsError(f"unknown {t.key} {key!r} (known: {', '.join(t.entries)})")
        for d in self.dated:
            env[d.name] = d.in_force(env[d.by])[1]
        self._run(self.formulas, lambda f: f.id not in self.dynamic, env, layer_envs, classes)
        warnings.extend(self.warnings_for(env, dynamic=False))
        return env, layer_envs

    def warnings_for(self, env: Mapping[str, Any], *, dynamic: bool) -> list[str]:
        """The warnings whose condition holds over ``env`` (the static ones, or those batch and sequence reach)."""
        units = self.units
        return [w.render(env, units) for w in self.warning_rules if w.dynamic == dynamic and w.when.evaluate(env)]

    def blocking_for(self, env: Mapping[str, Any], *, dynamic: bool) -> list[str]:
        """The warnings of :meth:`warnings_for` whose rule says the stack cannot run the settings (``blocks``)."""
        units = self.units
        return [w.render(env, units) for w in self.warning_rules
                if w.blocks and w.dynamic == dynamic and w.when.evaluate(env)]

    @property
    def units(self) -> dict:
        return {f.id: f.unit for f in self.formulas}

    def dynamic_env(self, spec, env: dict, layer_envs: list[dict]) -> None:
        """Evaluate the formulas that depend on batch or sequence, formula by formula, into ``env``
        (which holds ``batch_size`` and ``seq_len``) and ``layer_envs``."""
        self._run(self.formulas, lambda f: f.id in self.dynamic, env, layer_envs, spec.layer_classes)

    def _run(self, formulas, wanted, env: dict, layer_envs: list[dict], classes) -> None:
        rounded = self.reported
        for f in formulas:
            if not wanted(f):
                continue
            if f.scope == "layer":
                values = []
                for lc, lenv in zip(classes, layer_envs):
                    v = f.expr.evaluate({**env, **lenv})
                    lenv[f.id] = v
                    values.append((lc.count, v))
                env[f.id] = LayerValues(values)
            else:
                v = f.expr.evaluate(env)
                if f.id in rounded:
                    try:
                        v = round_bytes(v)
                    except (TypeError, ValueError, OverflowError) as exc:  # NaN, infinity, not a number
                        raise f.expr.failure(exc, env) from None
                env[f.id] = v

    def program(self, env: Mapping[str, Any], layer_envs: list[dict]) -> Program:
        """The compiled dynamic stage for static values of these types (built once per type signature)."""
        model_types = {n: type_tag(v) for n, v in env.items()}
        layer_types: dict[str, frozenset] = {}
        for lenv in layer_envs:
            for n, v in lenv.items():
                layer_types[n] = layer_types.get(n, frozenset()) | type_tag(v)
        key = (tuple(sorted(model_types.items())), tuple(sorted(layer_types.items())))
        prog = self._programs.get(key)
        if prog is None:
            prog = stored_program(self.formulas, self.dynamic, self.reported, model_types, layer_types,
                                 positive=frozenset((self.total,)), finite=frozenset((self.trainable_params, self.min_per_gpu)))
            if len(self._programs) >= 64:
                self._programs.clear()
            self._programs[key] = prog
        return prog

    def formula(self, fid: str) -> Formula:
        for f in self.formulas:
            if f.id == fid:
                return f
        raise KeyError(fid)


def check_inputs(profile: "Profile", family) -> str | None:
    """The problem when ``family`` lacks a fact or layer attribute ``profile`` needs, else None."""
    missing_f = [n for n in profile.model_inputs if n not in family.fact_names]
    missing_a = [n for n in profile.layer_inputs if n not in family.attribute_names]
    if not (missing_f or missing_a):
        return None
    return (
        f"{family.file}:1:1: $: family {family.name} lacks what profile {profile.name} needs: "
        + ", ".join([f"fact {n}" for n in missing_f] + [f"layer attribute {n}" for n in missing_a])
    )


@dataclass(frozen=True)
class Overlay:
    """A multi-GPU strategy added to a profile: its formula files are compiled with the profile's, and
    its outputs replace the profile's components, total, phases and figures (see formulas/strategies)."""

    name: str
    files: tuple  # DataFiles of the strategy
    manifest: DataFile  # the strategies manifest (for positions)
    parts: tuple  # where the outputs are in it
    outputs: Mapping[str, Any]
    ranks: tuple = ()  # of dicts (role, count, total, components), from the manifest
    methods: tuple | None = None  # the methods the profile's stack runs on several GPUs (None: all of the profile's)
    methods_note: str = ""  # why the others are not


def _settings_read(read: set, manifest: Mapping) -> frozenset:
    """The settings a profile's formulas read: a derived name reads its setting, and a profile of one
    method models that method whether its formulas read it or not."""
    out = (read & SETTING_NAMES) | {DERIVED_FROM[n] for n in read if n in DERIVED_FROM}
    return frozenset(out | ({"method"} if len(manifest.get("methods", ())) == 1 else set()))


def _dated_values(df: DataFile, name: str, d: Mapping, problems: list) -> tuple:
    """The (release key, release, value) entries of dated value ``name``, checked: a release setting,
    releases written MAJOR.MINOR.PATCH in ascending order (problems are appended, naming the key)."""
    if d["by"] not in RELEASE_SETTINGS:
        problems.append(df.problem(("dated", name, "by"), f"{d['by']!r} is not a release setting "
                                                          f"(release settings: {', '.join(RELEASE_SETTINGS)})"))
        return ()
    out = []
    for text, value in d["values"].items():
        parts = ("dated", name, "values", text)
        key = release_key(text) if isinstance(text, str) else None
        if key is None:
            problems.append(f"{df.key_where(parts)}: {json_path(parts)}: release {text!r} is not MAJOR.MINOR.PATCH (0.12.0)")
            return ()
        if out and key <= out[-1][0]:
            problems.append(f"{df.key_where(parts)}: {json_path(parts)}: release {text} is not after {out[-1][1]} "
                            "(releases in ascending order, each once)")
            return ()
        out.append((key, text, value))
    return tuple(out)


def _vocabulary_problems(manifest: DataFile, read: set, dated: list) -> list[str]:
    """What is wrong with the vocabularies the manifest declares (``settings``): each names a setting
    its formulas read, and every value dated by a release setting has a value from its first release."""
    declared = manifest.data.get("settings") or {}
    problems = []
    for name, entry in declared.items():
        if name not in SETTING_NAMES:
            problems.append(f"{manifest.key_where(('settings', name))}: $.settings.{name}: unknown setting {name!r}")
        elif name not in read:
            problems.append(f"{manifest.key_where(('settings', name))}: $.settings.{name}: the profile's formulas "
                            f"do not read {name}")
        elif "releases" in entry and "choices" in entry:
            problems.append(manifest.problem(("settings", name), "give choices or releases, not both"))
        elif "releases" in entry:
            first, last = (release_key(entry["releases"][k]) for k in ("first", "last"))
            if first is None or last is None or first > last:
                problems.append(manifest.problem(("settings", name, "releases"), "first and last are releases "
                                                 "MAJOR.MINOR.PATCH, first not after last"))
    for d in dated:
        releases = declared.get(d.by, {}).get("releases")
        if releases is None:
            problems.append(f"{d.where}: $.dated.{d.name}: dated by {d.by}, whose releases the profile "
                            f"{manifest.data['profile']} does not declare (settings.{d.by}.releases)")
        elif release_key(releases["first"]) is not None and d.values[0][0] > release_key(releases["first"]):
            problems.append(f"{d.where}: $.dated.{d.name}: no value from {releases['first']}, the first release "
                            f"of {d.by} the profile declares (the first is {d.values[0][1]})")
    return problems


def build_profile(manifest: DataFile, files: list[DataFile], overlay: Overlay | None = None) -> Profile:
    """Compile a profile (with a strategy's files and outputs when ``overlay`` is given): check every
    name and order formulas by dependency."""
    m = manifest.data
    if overlay is not None:
        out = overlay.outputs
        m = dict(m, components=out["components"], total=out["total"], min_per_gpu=out["min_per_gpu"],
                 phases=out.get("phases", {}), figures=out.get("figures", {}))
        files = list(files) + list(overlay.files)
    problems: list[str] = []
    model_inputs = tuple(m["inputs"]["model"])
    layer_inputs = tuple(m["inputs"]["layer"])
    constants: dict[str, float] = {}
    constant_info: dict[str, Constant] = {}
    tables: list[Table] = []
    dated: list[Dated] = []
    raw_formulas: list[tuple[DataFile, int, dict]] = []
    declared: dict[str, str] = {}

    def declare(name: str, where: str) -> None:
        if name in declared:
            problems.append(f"{where}: $: name {name!r} is already defined at {declared[name]}")
        declared[name] = where

    reserved = SETTING_NAMES | AGGREGATE_NAMES | {N_GPUS, LAYER_INDICES, MODEL_TYPE, LAYER_VALUES} | set(model_inputs) | set(layer_inputs)
    for df in files:
        stem = df.path.rsplit("/", 1)[-1].removesuffix(".yaml")
        if df.data["component"] != stem:
            problems.append(df.problem(("component",), f"component {df.data['component']!r} differs from the file name {stem!r}"))
        for name, c in (df.data.get("constants") or {}).items():
            where = df.key_where(("constants", name))
            declare(name, where)
            constants[name] = c["value"]
            constant_info[name] = Constant(name, c["value"], c.get("unit", ""), c.get("description", ""),
                                           c.get("source", ""), where)
        for name, t in (df.data.get("tables") or {}).items():
            where = df.key_where(("tables", name))
            declare(name, where)
            if t["key"] not in SETTING_NAMES:
                problems.append(df.problem(("tables", name, "key"), f"unknown setting {t['key']!r} (settings: {', '.join(sorted(SETTING_NAMES))})"))
            if t.get("unknown_warning") is not None:
                problem = template_problem(t["unknown_warning"], ("key", "default"))
                if problem:
                    problems.append(df.problem(("tables", name, "unknown_warning"), problem))
            tables.append(Table(name, t["key"], dict(t["entries"]), t.get("default"), t.get("unknown_warning"), where,
                                t.get("unit", ""), t.get("description", "")))
        for name, d in (df.data.get("dated") or {}).items():
            where = df.key_where(("dated", name))
            declare(name, where)
            values = _dated_values(df, name, d, problems)
            if values:
                dated.append(Dated(name, d["by"], values, where, d.get("unit", ""), d.get("description", "")))
        for k, f in enumerate(df.data.get("formulas") or ()):
            declare(f["id"], df.where(("formulas", k, "id")))
            raw_formulas.append((df, k, f))
    for name in declared:
        if name in reserved:
            problems.append(f"{declared[name]}: $: {name!r} is a reserved input name")
    if problems:
        raise FileFormatError(problems)

    graph_files = [df for df in files if "graph" in df.data]
    for df in graph_files:
        declare(df.data["graph"]["id"], df.where(("graph", "id")))
    if problems:
        raise FileFormatError(problems)
    layer_ids = {f["id"] for _, _, f in raw_formulas if f.get("scope", "model") == "layer"}
    model_ids = {f["id"] for _, _, f in raw_formulas if f.get("scope", "model") != "layer"}
    model_ids |= {df.data["graph"]["id"] for df in graph_files}
    base = SETTING_NAMES | AGGREGATE_NAMES | set(model_inputs) | set(constants) | {t.name for t in tables} | {d.name for d in dated}
    compiled: dict[str, Formula] = {}
    for df, k, f in raw_formulas:
        scope = f.get("scope", "model")
        if scope == "layer":
            allowed = base | set(layer_inputs) | layer_ids | model_ids | {LAYER_INDICES}
            layer_valued = frozenset()
        else:
            allowed = base | model_ids | set(layer_inputs) | layer_ids
            if f["id"] in (m["min_per_gpu"], manifest.data["min_per_gpu"]):
                allowed = allowed | {N_GPUS}
            layer_valued = frozenset(layer_inputs) | frozenset(layer_ids)
        expr = compile_expression(
            f["expr"], allowed=allowed, df=df, parts=("formulas", k, "expr"), layer_valued=layer_valued
        )
        compiled[f["id"]] = Formula(
            id=f["id"], scope=scope, expr=expr, unit=f["unit"], description=f["description"],
            source=f["source"], component=df.data["component"],
        )
    graph_layer_inputs: set[str] = set()
    if graph_files:  # only a profile with a graph section (llama.cpp) loads the allocator's simulation
        from vramwise.profiles.graphs import compile_graph
    for df in graph_files:  # a graph's value: the buffer ggml-alloc reserves for it (vramwise.profiles.graphs)
        gid, gexpr, info = compile_graph(df, frozenset(base | model_ids | {MODEL_TYPE}), "num_layers",
                                         frozenset(layer_inputs))
        graph_layer_inputs.update(gexpr.layer_inputs)
        compiled[gid] = Formula(id=gid, scope="model", expr=gexpr, component=df.data["component"], **info)
    # Dependency order (stable: file order where free); cycles are load errors.
    def formula_cycle(trail: tuple) -> FileFormatError:
        return FileFormatError(f"{compiled[trail[-1]].expr.where}: $: formula cycle: {' -> '.join(trail)}")

    order = [compiled[fid] for fid in dependency_order(compiled, lambda fid: compiled[fid].expr.names & compiled.keys(), formula_cycle)]
    dynamic = dynamic_ids(order)
    model_names = base | model_ids
    warning_rules = []
    for df in files:
        for k, w in enumerate(df.data.get("warnings") or ()):
            when = compile_expression(w["when"], allowed=model_names | set(layer_inputs) | layer_ids, df=df,
                                      parts=("warnings", k, "when"),
                                      layer_valued=frozenset(layer_inputs) | frozenset(layer_ids), what="condition")
            problem = template_problem(w["message"], model_names)
            if problem:
                problems.append(df.problem(("warnings", k, "message"), problem))
                continue
            shown = frozenset(_FIELD.findall(w["message"]))
            reads = when.names | shown
            warning_rules.append(WarningRule(when, w["message"], shown,
                                             bool(reads & (dynamic | {"batch_size", "seq_len"})), bool(w.get("blocks"))))
    refs = {"total": m["total"], "min_per_gpu": m["min_per_gpu"], "trainable_params": m["trainable_params"]}
    if "compiled" in m:
        refs["compiled"] = m["compiled"]
    refs.update({f"figures.{k}": v for k, v in m.get("figures", {}).items()})
    refs.update({f"phases.{k}": v for k, v in m.get("phases", {}).items()})
    refs.update({f"components.{k}": v for k, v in m["components"].items()})
    for k, fid in (m.get("serving") or {}).items():
        if k != "requires" and fid not in m.get("figures", {}).values():
            problems.append(manifest.problem(("serving", k), f"{fid!r} is not one of the profile's figures"))
    for k, rule in enumerate((m.get("serving") or {}).get("requires", ())):
        for j, name in enumerate(rule["settings"]):
            if name not in SETTING_NAMES:
                problems.append(manifest.problem(("serving", "requires", k, "settings", j), f"unknown setting {name!r}"))
    ref_src, ref_parts = (manifest, ()) if overlay is None else (overlay.manifest, overlay.parts)
    if overlay is not None:
        refs["host"] = overlay.outputs["host"]
        for k, g in enumerate(overlay.ranks):
            refs.update({f"ranks.{k}.count": g["count"], f"ranks.{k}.total": g["total"]})
            refs.update({f"ranks.{k}.components.{c}": v for c, v in g.get("components", {}).items()})
    for where, fid in refs.items():
        parts = tuple(int(x) if x.isdigit() else x for x in where.split("."))
        if fid not in compiled:
            problems.append(ref_src.problem(ref_parts + parts, f"unknown formula {fid!r}"))
        elif compiled[fid].scope != "model":
            problems.append(ref_src.problem(ref_parts + parts, f"formula {fid!r} must have model scope"))
    report = []
    figure_names = set(m.get("figures", {})) | {"batch_size", "seq_len"}
    for k, line in enumerate(m.get("report", ())):
        problem = template_problem(line["text"], figure_names)
        if problem:
            problems.append(manifest.problem(("report", k, "text"), problem))
        when = None
        if "when" in line:  # shown only where the condition over the figures holds (gpus > 1)
            when = compile_expression(line["when"], allowed=set(m.get("figures", {})), df=manifest,
                                      parts=("report", k, "when"), what="condition")
        report.append((line["text"], tuple(line["methods"]) if "methods" in line else None, when))
    report = tuple(report)
    if problems:
        raise FileFormatError(problems)
    read = set().union(*(f.expr.names for f in order), *(w.when.names | w.shown for w in warning_rules))
    read |= {t.key for t in tables} | {d.by for d in dated if d.name in read}
    problems.extend(_vocabulary_problems(manifest, read, dated))
    if problems:
        raise FileFormatError(problems)
    return Profile(
        name=m["profile"], file=manifest.path, description=m["description"], source=m["source"],
        model_inputs=model_inputs, layer_inputs=layer_inputs,
        default_targets=tuple(m["lora"]["default_targets"]),
        target_sets={k.lower(): tuple(v) for k, v in m["lora"]["target_sets"].items()},
        lora_convention=m["lora"].get("convention", "unsloth"),
        methods=tuple(x for x in m.get("methods", METHODS)
                      if overlay is None or overlay.methods is None or x in overlay.methods),
        methods_note=overlay.methods_note if overlay is not None else "",
        families=tuple(m["families"]) if "families" in m else None,
        summary=m.get("summary", ""),
        further_gpu_share=float(m["selection"]["further_gpu_share"]),
        report=report,
        components=dict(m["components"]), total=m["total"], min_per_gpu=m["min_per_gpu"],
        trainable_params=m["trainable_params"], figures=dict(m.get("figures", {})), phases=dict(m.get("phases", {})),
        compiled=m.get("compiled"), constants=constants, constant_info=constant_info,
        serving=m.get("serving"),
        tables=tuple(tables), dated=tuple(dated), formulas=tuple(order), dynamic=dynamic, warning_rules=tuple(warning_rules),
        settings_read=_settings_read(read, m), graph_layer_inputs=tuple(sorted(graph_layer_inputs)),
        strategy=overlay.name if overlay is not None else None,
        host=overlay.outputs["host"] if overlay is not None else None,
        rank_groups=tuple((g["role"], g["count"], g["total"], dict(g.get("components", {}))) for g in overlay.ranks)
        if overlay is not None else (),
        **_notes(manifest, m),
    )


def _notes(manifest: DataFile, m: Mapping) -> dict:
    """The profile's notes for the surfaces: the other stack's profile (``other_profile``) and why a
    component is 0 at the peak phase (``absent``, each phase named one of the profile's phases)."""
    problems, absent = [], []
    phases = m.get("phases", {})
    for k, a in enumerate(m.get("absent") or ()):
        phase = a.get("phase")
        if phase is not None and phase not in phases:
            problems.append(manifest.problem(("absent", k, "phase"), f"{phase!r} is not a phase of this profile "
                                                                      f"(phases: {', '.join(phases) or 'none'})"))
        absent.append((a["component"], phase, a["why"]))
    if problems:
        raise FileFormatError(problems)
    other = m.get("other_profile")
    return {"absent": tuple(absent), "other_profile": (other["profile"], float(other["ratio"])) if other else None}
