"""The estimate: settings + resolved model + profile -> a frozen breakdown in bytes.

An estimate is computed in two stages (see :mod:`vramwise.rules.expr.codegen`): everything that
does not depend on batch and sequence is evaluated once per model, profile and other
settings and kept on the registry (a :class:`Stage`); the rest is one call of the
profile's compiled program. Models are resolved once per config (see
:meth:`Registry.model`), so repeated estimates of one model cost a few dictionary
look-ups and that call.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import FrozenInstanceError, dataclass
from typing import Any, Mapping

from vramwise.profiles.bands import ErrorBands, band_for, device_band_for
from vramwise.errors import InternalError, SettingsError
from vramwise.rules.expr.language import LayerValues, round_bytes
from vramwise.models.model import INVENTORY_DOCS, NO_ADAPTERS, LoraSums, ModelSpec
from vramwise.rules.expr.codegen import MAX_FIGURE, static_tuple
from vramwise.profiles.profile import Profile
from vramwise.estimation.recipe import Recipe, unpack
from vramwise.estimation.registry import Registry
from vramwise.profiles.settings import ADAPTER_METHODS, DEFAULT_PROFILE, DEFAULTS, DERIVED_NAMES, LIMITS, SETTINGS, TrainingSettings, normalise_static, positive_int, unmodelled_settings, unused_settings

_MAX_BATCH, _MAX_SEQ = LIMITS["batch_size"], LIMITS["seq_len"]

__all__ = ["Estimate", "RankEstimate", "TraceEntry", "Provenance", "load_model", "estimate", "COMPONENTS", "Stage", "needs_stored_checkpoint"]

#: Reported components, in display order.
COMPONENTS = ("weights", "lora", "optimizer", "gradients", "activations", "overhead")
_GIB = 1024**3


@dataclass(frozen=True)
class TraceEntry:
    """One evaluated formula: where it is written, what went in, what came out."""

    id: str
    component: str
    file: str
    line: int
    expression: str
    inputs: Mapping[str, Any]
    value: Any
    unit: str
    description: str
    source: str
    layer_indices: tuple | None = None  # set for a layer-scope formula: the layers it was evaluated for

    def location(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class RankEstimate:
    """What ``count`` ranks (GPUs) of a multi-GPU strategy each need, in bytes."""

    role: str  # what these ranks hold, e.g. "each rank"
    count: int  # how many ranks hold this
    total: int  # bytes each of them needs (the device figure: tensors, allocator reserve, CUDA context)
    components: Mapping[str, int]  # weights, lora, optimizer, gradients, activations, overhead

    def to_dict(self) -> dict:
        return {"role": self.role, "count": self.count, "total": self.total, **self.components}


@dataclass(frozen=True)
class Provenance:
    """Where an input of the formulas comes from: a fact of the config, a layer attribute, a constant,
    a table entry, or a total of the inventory; with its file:line."""

    kind: str  # "fact", "attribute", "constant", "table" or "inventory"
    name: str
    value: Any
    unit: str
    file: str
    line: int | None
    how: str  # e.g. "config field num_key_value_heads", "default", "derived as `...`", "optimizer = 'adamw_8bit'"
    description: str
    layer_indices: tuple | None = None  # set for a layer attribute: the layers with this value

    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file


def _file_line(where: str) -> tuple[str, int | None]:
    file, line, _ = where.rsplit(":", 2)
    return file, int(line)


class Stage:
    """What an estimate computes before batch and sequence are known, for one model, profile and settings."""

    __slots__ = ("spec", "profile", "settings", "lora", "warnings", "env", "layer_envs", "program", "static",
                 "counts", "_where", "registry")

    def __init__(self, spec: ModelSpec, prof: Profile, settings: dict, lora: LoraSums, warnings: list,
                 registry: Registry | None = None):
        self.spec, self.profile, self.settings, self.lora = spec, prof, settings, lora
        self.registry = registry  # where the same run is estimated again on another number of GPUs (strategies)
        names = {k: v for k, v in settings.items() if k != "target_modules"}
        self.env, self.layer_envs = prof.static_env(spec, names, lora, warnings)
        self.warnings = tuple(warnings)
        self.program = prof.program(self.env, self.layer_envs)
        self.static = static_tuple(self.program, self.env, self.layer_envs)
        self.counts = tuple(lc.count for lc in spec.layer_classes)
        where = {fid: (True, k) for k, fid in enumerate(self.program.model_ids)}
        self._where = where
        self.check(None)  # the figures no batch or sequence can change are checked once, here

    def value(self, fid: str, dynamic: tuple):
        """The value of a model-scope formula, from the dynamic results or the static env."""
        hit = self._where.get(fid)
        return dynamic[hit[1]] if hit is not None else self.env[fid]

    def run(self, batch_size: int, seq_len: int) -> tuple[tuple, tuple]:
        try:
            return self.program.function(batch_size, seq_len, self.static, self.counts)
        except Exception:  # noqa: BLE001 - evaluate formula by formula to name the failing one
            env, layer_envs = self.full_env(batch_size, seq_len, None)
            results = (tuple(env[i] for i in self.program.model_ids),
                       tuple([lenv[i] for lenv in layer_envs] for i in self.program.layer_ids))
            self.check(results[0])
            return results

    def check(self, dynamic: tuple | None) -> None:
        """Raise :class:`InternalError` unless every reported figure is an int >= 0, the total is
        finite and > 0, and the trainable parameters and per-GPU minimum are finite and >= 0.
        ``dynamic`` None: check only the figures of the static stage."""
        prof = self.profile
        ratios = prof.ratio_ids
        checks = [(name, fid, "finite" if fid in ratios else "int") for name, fid in sorted(_reported_names(prof).items())]
        checks += [(prof.total, prof.total, "positive"), (prof.trainable_params, prof.trainable_params, "finite"),
                   (prof.min_per_gpu, prof.min_per_gpu, "finite")]
        for name, fid, rule in checks:
            if dynamic is None and fid in self._where:
                continue
            v = self.value(fid, dynamic)
            ok = (type(v) is int and 0 <= v <= MAX_FIGURE) if rule == "int" else (
                _finite(v) and v <= MAX_FIGURE and (v > 0 if rule == "positive" else v >= 0))
            if not ok:
                raise _broken(prof, fid, name, v)

    def full_env(self, batch_size: int, seq_len: int, results: tuple | None) -> tuple[dict, list]:
        """Every name of the estimate: the static env plus the dynamic formulas (evaluated formula by
        formula when ``results`` is None, which raises the failing formula's EvaluationError)."""
        env = dict(self.env)
        env["batch_size"], env["seq_len"] = batch_size, seq_len
        layer_envs = [dict(lenv) for lenv in self.layer_envs]
        if results is None:
            self.profile.dynamic_env(self.spec, env, layer_envs)
            return env, layer_envs
        model_values, layer_values = results
        env.update(zip(self.program.model_ids, model_values))
        for fid, values in zip(self.program.layer_ids, layer_values):
            for lenv, v in zip(layer_envs, values):
                lenv[fid] = v
            env[fid] = LayerValues(zip(self.counts, values))
        return env, layer_envs


def _reported_names(prof: Profile) -> dict:
    out = {f"components.{k}": v for k, v in prof.components.items()}
    out.update({f"figures.{k}": v for k, v in prof.figures.items()})
    out.update({f"phases.{k}": v for k, v in prof.phases.items()})
    if prof.host is not None:
        out["host_bytes"] = prof.host
    for k, (_, count, total, comps) in enumerate(prof.rank_groups):
        out.update({f"ranks.{k}.count": count, f"ranks.{k}.total": total})
        out.update({f"ranks.{k}.{c}": v for c, v in comps.items()})
    return out


def _is_real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v) -> bool:
    """A real number that is finite (an int always is; a float is compared without converting an int)."""
    return _is_real(v) and (isinstance(v, int) or math.isfinite(v))


def _broken(prof: Profile, fid: str, name: str, value) -> InternalError:
    f = prof.formula(fid)
    return InternalError(
        f"{f.expr.where}: {name} ({fid}) is {str(value)[:60]}; every figure must be a whole number of bytes "
        f"from 0 to 2**80 and the total > 0. This is a bug in vramwise or in the formula files it loaded."
    )


class Estimate:
    """Memory needed to train ``model`` with ``settings``, in bytes (immutable).

    Components (``weights``, ``lora``, ``optimizer``, ``gradients``, ``activations``,
    ``overhead``) and ``total`` are ints; ``figures`` and ``phases`` map names to ints.
    """

    __slots__ = ("_stage", "_batch", "_seq", "_results", "_memo")

    def __init__(self, stage: Stage, batch_size: int, seq_len: int, results: tuple):
        set_ = object.__setattr__
        set_(self, "_stage", stage)
        set_(self, "_batch", batch_size)
        set_(self, "_seq", seq_len)
        set_(self, "_results", results)
        set_(self, "_memo", {})

    def __setattr__(self, name, value):
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _get(self, fid: str):
        return self._stage.value(fid, self._results[0])

    # -- components -----------------------------------------------------------------------
    @property
    def weights(self) -> int:
        return self._get(self._stage.profile.components["weights"])

    @property
    def lora(self) -> int:
        return self._get(self._stage.profile.components["lora"])

    @property
    def optimizer(self) -> int:
        return self._get(self._stage.profile.components["optimizer"])

    @property
    def gradients(self) -> int:
        return self._get(self._stage.profile.components["gradients"])

    @property
    def activations(self) -> int:
        return self._get(self._stage.profile.components["activations"])

    @property
    def overhead(self) -> int:
        return self._get(self._stage.profile.components["overhead"])

    @property
    def total(self) -> int:
        return round_bytes(self._get(self._stage.profile.total))

    @property
    def params_total(self) -> int:
        return self._stage.spec.params_total

    @property
    def params_trainable(self) -> int:
        return round_bytes(self._get(self._stage.profile.trainable_params))

    @property
    def figures(self) -> dict[str, int]:
        return {name: self._get(fid) for name, fid in self._stage.profile.figures.items()}

    @property
    def phases(self) -> dict[str, int]:
        """Peak bytes of each phase of the training step (profiles that model phases)."""
        return {name: self._get(fid) for name, fid in self._stage.profile.phases.items()}

    # -- what it was computed for ---------------------------------------------------------
    @property
    def model(self) -> ModelSpec:
        return self._stage.spec

    @property
    def family(self) -> str:
        return self._stage.spec.family

    @property
    def profile(self) -> str:
        return self._stage.profile.name

    @property
    def model_type(self) -> str | None:
        return self._stage.spec.model_type

    @property
    def settings(self) -> TrainingSettings:
        s = self._memo.get("settings")
        if s is None:
            values = dict(self._stage.settings, batch_size=self._batch, seq_len=self._seq)
            s = self._memo["settings"] = TrainingSettings(**{x.name: values[x.name] for x in SETTINGS})
        return s

    @property
    def lora_targets(self) -> tuple:
        return tuple(sorted(self._stage.lora.matched))

    @property
    def warnings(self) -> tuple:
        prof = self._stage.profile
        if not any(w.dynamic for w in prof.warning_rules):
            return self._stage.warnings
        got = self._memo.get("warnings")
        if got is None:
            got = self._memo["warnings"] = self._stage.warnings + tuple(prof.warnings_for(self._env()[0], dynamic=True))
        return got

    @property
    def blocking(self) -> tuple:
        """The warnings (among :attr:`warnings`) that say the stack cannot run these settings: those of
        the formula files' warnings marked ``blocks: true``; empty when the run can happen."""
        got = self._memo.get("blocking")
        if got is None:
            prof = self._stage.profile
            got = tuple(prof.blocking_for(self._stage.env, dynamic=False))
            if any(w.blocks and w.dynamic for w in prof.warning_rules):
                got += tuple(prof.blocking_for(self._env()[0], dynamic=True))
            self._memo["blocking"] = got
        return got

    # -- multi-GPU strategies ---------------------------------------------------------------
    @property
    def strategy(self) -> str | None:
        """The multi-GPU strategy the figures are per rank of (None: one GPU)."""
        return self._stage.profile.strategy

    @property
    def world_size(self) -> int:
        """GPUs the estimate is for (1 without a strategy)."""
        return self._stage.settings["world_size"] if self.strategy else 1

    @property
    def per_rank(self) -> tuple | None:
        """With a strategy: the ranks as groups that need the same bytes (:class:`RankEstimate`, each
        with its count); the components and total of the estimate are those of the busiest rank."""
        prof = self._stage.profile
        if prof.strategy is None:
            return None
        got = self._memo.get("per_rank")
        if got is None:
            if prof.rank_groups:
                groups = [RankEstimate(role, round_bytes(self._get(count)), round_bytes(self._get(total)),
                                       {c: self._get(fid) for c, fid in comps.items()})
                          for role, count, total, comps in prof.rank_groups]
                got = tuple(g for g in groups if g.count > 0)
            else:
                got = (RankEstimate("each rank", self.world_size, self.total, self.components()),)
            self._memo["per_rank"] = got
        return got

    @property
    def host_bytes(self) -> int | None:
        """With a strategy: host memory one machine needs for what the strategy keeps there (None without one)."""
        prof = self._stage.profile
        return None if prof.host is None else self._get(prof.host)

    @property
    def error_band(self) -> ErrorBands:
        """How far estimates like this one were off (:mod:`~vramwise.profiles.bands`): ``tensors``, the tensor peak
        against CPU-measured steps of this profile x method x strategy; ``device``, the device total against
        published GPU runs of this profile and method."""
        got = self._memo.get("error_band")
        if got is None:
            s = self._stage.settings
            prof = self._stage.profile
            # compile: a profile naming its compiled flag has compiled bands, and none where the flag is false
            compiled = bool(s["compile"]) and prof.compiled is not None
            modelled = not compiled or bool(self._get(prof.compiled))
            got = self._memo["error_band"] = ErrorBands(
                band_for(prof, s["method"], self.strategy, s["load_in_4bit"], compiled, modelled),
                device_band_for(prof, s["method"], s["load_in_4bit"]))
        return got

    @property
    def profile_data(self) -> Profile:
        """The compiled profile this estimate was made under (its summary, report lines and figure units,
        its GPU-selection share): what a surface prints about the profile, without the registry."""
        return self._stage.profile

    @property
    def strategy_info(self) -> Mapping[str, Any] | None:
        """The strategy's manifest entry (summary, host note, least world size), None without a strategy."""
        strategy = self.strategy
        return None if strategy is None else self._stage.registry.strategy_info(strategy)

    def __repr__(self) -> str:
        comps = ", ".join(f"{c}={getattr(self, c)}" for c in COMPONENTS)
        return f"Estimate({comps}, total={self.total}, family={self.family!r}, profile={self.profile!r})"

    # -- derived --------------------------------------------------------------------------
    def _env(self) -> tuple[dict, list]:
        got = self._memo.get("env")
        if got is None:
            got = self._memo["env"] = self._stage.full_env(self._batch, self._seq, self._results)
        return got

    def _rerun(self, **changes) -> "Estimate":
        """The same model, profile and settings, with ``changes``."""
        values = {k: v for k, v in self._stage.settings.items() if k not in DERIVED_NAMES}
        values.update(batch_size=self._batch, seq_len=self._seq, **changes)
        return estimate(self._stage.spec, profile=self._stage.profile.name, registry=self._stage.registry, **values)

    def at_world_size(self, n: int) -> "Estimate":
        """The same run under the same strategy on ``n`` GPUs (this estimate when ``n`` is its world size)."""
        if self.strategy is None:
            raise SettingsError("at_world_size needs an estimate with a multi-GPU strategy")
        return self if n == self.world_size else self._rerun(world_size=n)

    def min_per_gpu(self, n: int = 1) -> int:
        """Least memory each of ``n`` GPUs needs when the model is split over them (profile formula).
        Under a multi-GPU strategy: what each rank needs when the strategy runs on ``n`` GPUs."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise SettingsError(f"the number of GPUs must be a positive integer, got {n!r}")
        if self.strategy is not None:
            least = self.strategy_info.get("min_world_size", 1)
            if n < least:  # fewer GPUs than the strategy spreads over: the whole run on each of them
                return self._rerun(strategy="none", world_size=1, offload="none").total
            return self.at_world_size(n).total
        prof = self._stage.profile
        if n == 1:
            return round_bytes(self._get(prof.min_per_gpu))
        env = dict(self._env()[0])
        env["n_gpus"] = n
        f = prof.formula(prof.min_per_gpu)
        v = f.expr.evaluate(env)
        if not (_finite(v) and 0 <= v <= MAX_FIGURE):
            raise _broken(prof, f.id, f"min_per_gpu({n})", v)
        return round_bytes(v)

    @property
    def peak_phase(self) -> str | None:
        """The phase of the training step whose peak is highest (None when the profile has no phases)."""
        phases = self.phases
        if not phases:
            return None
        return max(phases, key=lambda k: phases[k])

    def components(self) -> dict[str, int]:
        return {c: getattr(self, c) for c in COMPONENTS}

    def to_dict(self) -> dict:
        """Plain data (bytes as ints), suitable for JSON."""
        return {
            "family": self.family,
            "profile": self.profile,
            "model_type": self.model_type,
            "params_total": self.params_total,
            "params_trainable": self.params_trainable,
            **self.components(),
            "total": self.total,
            "settings": self.settings.to_dict(),
            "figures": self.figures,
            "phases": self.phases,
            "peak_phase": self.peak_phase,
            "lora_targets": list(self.lora_targets),
            "warnings": list(self.warnings),
            "error_band": self.error_band.to_dict(),
            **({} if self.strategy is None else {
                "strategy": self.strategy, "world_size": self.world_size, "host_bytes": self.host_bytes,
                "per_rank": [r.to_dict() for r in self.per_rank]}),
            **({} if self.serving is None else {"serving": self.serving}),
        }

    @property
    def serving(self) -> dict | None:
        """Under a serving profile: whether the server starts, the KV-cache tokens, the concurrency at
        max_model_len and the largest max_model_len that starts (None under a training profile)."""
        names = self._stage.profile.serving
        if names is None:
            return None
        f = self.figures
        return {"starts": bool(f[names["starts"]]), "kv_cache_tokens": f[names["kv_cache_tokens"]],
                "max_concurrency": f[names["max_concurrency"]],
                "largest_max_model_len": f[names["largest_max_model_len"]] or None}

    def to_gb_dict(self) -> dict[str, float]:
        """Components and total in GiB (2**30 bytes)."""
        out = {c: v / _GIB for c, v in self.components().items()}
        out["total"] = self.total / _GIB
        return out

    @property
    def provenance(self) -> tuple:
        """Where every input of the formulas comes from (facts, layer attributes, constants, tables,
        inventory totals), each with its file and line."""
        got = self._memo.get("provenance")
        if got is None:
            got = self._memo["provenance"] = self._provenance()
        return got

    def _provenance(self) -> tuple:
        spec, prof, env = self._stage.spec, self._stage.profile, self._stage.env
        out: list[Provenance] = []
        fam = spec.compiled_family
        if fam is not None:
            for rule in fam.facts:
                origin = spec.fact_origins.get(rule.name)
                if origin is None:
                    continue
                out.append(Provenance("fact", rule.name, spec.facts[rule.name], rule.unit, *_file_line(origin.where),
                                      origin.describe(), rule.description))
            by_name = {a.name: a for a in fam.attributes}
            for name in prof.layer_inputs:
                a = by_name[name]
                for lc in spec.layer_classes:
                    out.append(Provenance("attribute", name, lc.attributes[name], a.unit, *_file_line(a.expr.where),
                                          f"`{a.expr.text}`", a.description, lc.indices))
        for c in prof.constant_info.values():
            out.append(Provenance("constant", c.name, c.value, c.unit, *_file_line(c.where), c.source, c.description))
        for t in prof.tables:
            key = env[t.key]
            how = f"{t.key} = {key!r}" + ("" if key in t.entries else " (not listed: the default)")
            out.append(Provenance("table", t.name, env[t.name], t.unit, *_file_line(t.where), how, t.description))
        for d in prof.dated:  # a value dated by release: a table keyed by the release it dates from
            since, _ = d.in_force(env[d.by])
            out.append(Provenance("table", d.name, env[d.name], d.unit, *_file_line(d.where),
                                  f"{d.by} = {env[d.by]!r} (the value from {since} on)", d.description))
        for name, value in spec.aggregates.items():
            out.append(Provenance("inventory", name, value, "", spec.family_file, None, INVENTORY_DOCS[name], ""))
        return tuple(out)

    @property
    def trace(self) -> tuple:
        """Every formula evaluated for this estimate, in evaluation order."""
        got = self._memo.get("trace")
        if got is None:
            got = self._memo["trace"] = self._trace()
        return got

    def _trace(self) -> tuple:
        entries = []
        env, layer_envs = self._env()
        classes = self._stage.spec.layer_classes
        prof = self._stage.profile
        for f in prof.formulas:
            if f.scope == "layer":
                for lc, lenv in zip(classes, layer_envs):
                    scope = {**env, **lenv}
                    entries.append(
                        TraceEntry(
                            id=f.id, component=f.component, file=f.expr.file, line=f.expr.line, expression=f.expr.text,
                            inputs={n: scope[n] for n in sorted(f.expr.names)}, value=lenv[f.id], unit=f.unit,
                            description=f.description, source=f.source, layer_indices=lc.indices,
                        )
                    )
                continue
            inputs = {}
            for n in sorted(f.expr.names):
                v = env[n]
                inputs[n] = tuple(x for _, x in v) if isinstance(v, LayerValues) else v
            entries.append(
                TraceEntry(
                    id=f.id, component=f.component, file=f.expr.file, line=f.expr.line, expression=f.expr.text,
                    inputs=inputs, value=env[f.id], unit=f.unit, description=f.description, source=f.source,
                )
            )
        return tuple(entries)


def load_model(model: Any, *, trust_remote_code: bool = False, registry: Registry | None = None) -> ModelSpec:
    """Read a model's config and resolve it against its family (no training settings involved).

    Resolutions are kept by the registry: the same mapping (by content) or the same unchanged
    file is resolved once.
    """
    if isinstance(model, ModelSpec):
        return model
    return (registry or Registry.default()).model(model, trust_remote_code=trust_remote_code)




class _StaticKey:
    """The key of one normalised combination of settings: its items, hashed once (a stage is looked up by
    it on every estimate)."""

    __slots__ = ("items", "hash")

    def __init__(self, items: tuple):
        self.items, self.hash = items, hash(items)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other) -> bool:
        return self is other or (type(other) is _StaticKey and self.hash == other.hash and self.items == other.items)


def _check_as_stored(reg: Registry, spec: ModelSpec, prof: Profile, static: dict) -> None:
    """A checkpoint loaded as stored (a GGUF file's quantized tensors) is estimated for inference only, under a
    profile whose formulas read its bytes (``checkpoint_as_stored``); otherwise one SettingsError saying so."""
    fmt = spec.checkpoint_format or "stored"
    if static["method"] != "inference":
        own = [n for n in reg.profile_names() if needs_stored_checkpoint(reg.profile(n))]
        runtime = "".join(f"--profile {n} ({n}'s own memory) or " for n in own)
        raise SettingsError(
            f"a {fmt} file holds quantized weights for inference (llama.cpp): vramwise estimates it with {runtime}--method "
            f"inference (method=\"inference\"); a {static['method']} estimate needs the model's config.json or its hub id")
    if not _reads_stored(prof):
        users = " or ".join(sorted(_as_stored_profiles(reg)))
        raise SettingsError(f"the {prof.name} profile does not count the weights of a {fmt} file as stored"
                            + (f": use the {users} profile" if users else ""))


#: Inventory names that only a checkpoint loaded as stored gives (a GGUF file's tensors by where llama.cpp puts them).
_STORED_ONLY = frozenset({"stored_layer_bytes_from", "stored_embedding_bytes", "stored_output_bytes",
                          "stored_duplicated_output_bytes", "stored_vocab_tokens"})


def _reads_stored(prof: Profile) -> bool:
    """Whether ``prof``'s formulas read the bytes of a checkpoint loaded as stored."""
    return any("checkpoint_as_stored" in f.expr.names or f.expr.names & _STORED_ONLY for f in prof.formulas)


def needs_stored_checkpoint(prof: Profile) -> bool:
    """Whether ``prof`` estimates only a checkpoint loaded as stored (its formulas read its tensors' placement)."""
    return any(f.expr.names & _STORED_ONLY for f in prof.formulas)


def _as_stored_profiles(reg: Registry) -> list:
    return [n for n in reg.profile_names()
            if "inference" in reg.profile(n).methods and _reads_stored(reg.profile(n))]


def _stage(reg: Registry, spec: ModelSpec, prof: Profile, static: dict) -> Stage:
    key = (spec, prof, static["_key"])
    stage = reg.stages.get(key)
    if stage is not None:
        return stage
    prof.check_family(spec.compiled_family)
    if spec.inventory.checkpoint_as_stored:
        _check_as_stored(reg, spec, prof, static)
    elif needs_stored_checkpoint(prof):
        raise SettingsError(f"the {prof.name} profile estimates a GGUF file (its tensors as stored, placed as "
                            f"{prof.name} places them): give the model's .gguf file, not its config")
    if prof.serving is None and static["gpu_memory"] is not None:  # naming a GPU asks whether the run fits on it
        given = f"gpu {static['gpu']!r}" if static["gpu"] is not None else f"gpu_memory {static['gpu_memory']:,}"
        raise SettingsError(f"{given} is the GPU a serving profile (vllm) runs on; the {prof.name} profile's estimate is "
                            "the memory the run needs on any GPU: to check it against a GPU, ask fit with that GPU "
                            "(vramwise fit MODEL --gpu H100, or --gpu 80GB; vramwise.fit(model, gpu=...))")
    warnings = list(spec.warnings)
    if static["gpu"] is not None:  # a catalog GPU named: what of the settings does not run on its platform
        from vramwise.inputs.gpu_catalog import gpu_spec
        from vramwise.inputs.runs_on import check as runs_on_check

        warnings.extend(r.line() for r in runs_on_check(gpu_spec(static["gpu"]).vendor, prof.name, static,
                                                          reads=prof.settings_read).refusals)
    unused = unused_settings(static)
    if unused:
        warnings.append(f"{', '.join(f'{n}={static[n]!r}' for n in unused)} "
                        f"{'does' if len(unused) == 1 else 'do'} not apply to {static['method']}: ignored")
    read = prof.settings_read | ({"strategy", "world_size"} if prof.strategy else set())
    unmodelled = unmodelled_settings(static, read, unused)
    if unmodelled:
        warnings.append(f"{', '.join(f'{n}={static[n]!r}' for n in unmodelled)} "
                        f"{'is' if len(unmodelled) == 1 else 'are'} not modelled by the {prof.name} profile: ignored")
    if static["method"] not in ADAPTER_METHODS or prof.lora_convention == "none":
        lora = NO_ADAPTERS
    else:
        targets, explicit = prof.expand_targets(static["target_modules"])
        lora = spec.peft_lora_sums(targets) if prof.lora_convention == "peft" else spec.lora_sums(targets, explicit)
        unmatched = sorted(targets - lora.matched)
        if unmatched:
            warnings.append(f"LoRA target(s) {', '.join(unmatched)} match no module of this model")
        if not lora.matched:
            warnings.append("no LoRA target matches a module of this model: the adapter is empty")
    settings = {k: v for k, v in static.items() if k != "_key"}
    if static["model_draft"] is not None or static["mmproj"] is not None:  # what is loaded beside the model
        from vramwise.estimation.companions import companion_values

        settings.update(companion_values(reg, spec, prof, static, warnings,
                                         lambda s, given: _stage(reg, s, prof, _static_settings(reg, prof.name, given))))
    stage = Stage(spec, prof, settings, lora, warnings, reg)
    reg.stages.put(key, stage)
    return stage


def _static_settings(reg: Registry, profile: str, given: dict) -> dict:
    """The normalised static settings of a call that gives ``given`` (no per-call setting among them) with
    ``profile``, kept by the registry under the given items and their types (which tell apart values Python calls
    equal: 1, 1.0, True); a call that gives the same items in another order is a key of its own, normalised to the
    same settings."""
    try:
        key = (profile, tuple(given.items()), tuple(map(type, given.values())))
        hit = reg.settings.get(key)
    except TypeError:  # an unhashable value (a list of LoRA alpha values): normalise without the cache
        hit, key = None, None
    if hit is not None:
        return hit
    values = {**_STATIC_DEFAULTS, **given}
    values["profile"] = profile
    static = normalise_static(values)
    static["_key"] = _StaticKey(tuple(static.items()))
    if key is not None:
        reg.settings.put(key, static)
    return static


#: the defaults of the settings that hold for every batch and sequence of a model (all but the per-call ones)
_STATIC_DEFAULTS = {s.name: s.default for s in SETTINGS if not s.per_call}
_BATCH_DEFAULT, _SEQ_DEFAULT = DEFAULTS["batch_size"], DEFAULTS["seq_len"]


def _strategy_profile(reg: Registry, profile: str, static: dict) -> Profile:
    """The profile with the strategy's formulas, once the strategy is known to model these settings."""
    info = reg.strategy_info(static["strategy"])
    if static["offload"] not in info["offload"]:
        raise SettingsError(f"strategy {static['strategy']} does not offload {static['offload']} "
                            f"(offload: {', '.join(info['offload'])})")
    least = info.get("min_world_size", 1)
    if static["world_size"] < least:
        raise SettingsError(f"strategy {static['strategy']} runs on at least {least} GPUs, got world_size {static['world_size']}")
    return reg.profile(profile, static["strategy"])


def estimate(model: Any, *, profile: str | None = None, trust_remote_code: bool = False,
             registry: Registry | None = None, **settings: Any) -> Estimate:
    """Estimate the GPU memory of fine-tuning ``model``.

    ``model`` is a path to a config.json or a model folder, a dict, a transformers
    ``PretrainedConfig``, a hub id, or a :class:`ModelSpec` from :func:`load_model`.
    The training settings are keyword arguments named and defaulted as in
    :data:`vramwise.SETTINGS` (method, batch_size, seq_len, lora_rank, target_modules,
    gradient_checkpointing, optimizer, attention, load_in_4bit, loss, lora_dropout).
    ``model`` may also be a :class:`~vramwise.Recipe` (:func:`vramwise.read_recipe`): its model,
    profile and settings, under the ones given here. ``profile`` None is the recipe's, else
    :data:`~vramwise.profiles.settings.DEFAULT_PROFILE`.
    """
    reg = registry or Registry.default()
    if type(model) is Recipe:
        model, profile, settings = unpack(model, profile, settings)
    if profile is None:
        profile = DEFAULT_PROFILE
    if not isinstance(profile, str):
        raise SettingsError(f"profile must be a name, got {type(profile).__name__}")
    if "method" not in settings:
        only = reg.profile(profile)  # an unknown profile: its one-line error here
        if len(only.methods) == 1 and only.serving is None:  # a profile of one method (llama.cpp: inference) runs it
            settings["method"] = only.methods[0]
    if not settings.keys() <= DEFAULTS.keys():  # a containment test builds no set on the way
        unknown = settings.keys() - DEFAULTS.keys()
        raise SettingsError(f"unknown setting(s) {', '.join(sorted(unknown))} (settings: {', '.join(DEFAULTS)})")
    # the keyword dict is this call's own (a recipe's settings come back as a new dict), so the per-call settings
    # are taken out of it: what remains is the key of the static settings
    batch, seq = settings.pop("batch_size", _BATCH_DEFAULT), settings.pop("seq_len", _SEQ_DEFAULT)
    if type(settings.get("target_modules")) is list:
        settings["target_modules"] = tuple(settings["target_modules"])
    static = _static_settings(reg, profile, settings)
    if type(batch) is not int or not 0 < batch <= _MAX_BATCH:
        batch = positive_int("batch_size", batch)
    if type(seq) is not int or not 0 < seq <= _MAX_SEQ:
        seq = positive_int("seq_len", seq)
    strategy = static["strategy"]
    if strategy != "none" and static["method"] != "inference":
        prof = _strategy_profile(reg, profile, static)
    else:
        prof = reg.profile(profile)
    if static["method"] not in prof.methods:
        under = f" under strategy {prof.strategy}" if prof.strategy else ""
        why = f": {prof.methods_note}" if prof.methods_note else ""
        raise SettingsError(f"profile {prof.name}{under} does not model {static['method']} "
                            f"(it models {', '.join(prof.methods)}){why}")
    if prof.serving is not None:  # (only a serving profile requires a setting)
        prof.check_required(static)
    if prof.serving is not None and (batch != DEFAULTS["batch_size"] or seq != DEFAULTS["seq_len"]):
        raise SettingsError("a vLLM server's context is max_model_len and its batch max_num_seqs, not seq_len and "
                            "batch_size (a training step's): give --max-model-len / --max-num-seqs "
                            "(max_model_len=, max_num_seqs=)")
    spec = model if isinstance(model, ModelSpec) else reg.model(model, trust_remote_code=trust_remote_code)
    stage = _stage(reg, spec, prof, static)
    return Estimate(stage, batch, seq, stage.run(batch, seq))


estimate.__signature__ = inspect.Signature(
    [inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    + [inspect.Parameter(s.name, inspect.Parameter.KEYWORD_ONLY, default=s.default) for s in SETTINGS]
    + [inspect.Parameter("profile", inspect.Parameter.KEYWORD_ONLY, default=None),
       inspect.Parameter("trust_remote_code", inspect.Parameter.KEYWORD_ONLY, default=False),
       inspect.Parameter("registry", inspect.Parameter.KEYWORD_ONLY, default=None)],
    return_annotation=Estimate,
)
