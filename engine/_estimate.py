"""The estimate: settings + resolved model + profile -> a frozen breakdown in bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from functools import cached_property
from typing import Any, Mapping

from ._errors import SettingsError
from ._expr import LayerValues
from ._model import NO_ADAPTERS, LoraSums, ModelSpec, resolve_model
from ._profile import Profile, round_bytes
from ._registry import Registry
from ._settings import TrainingSettings, normalise_settings
from ._source import checkpoint_size, read_config, text_view

__all__ = ["Estimate", "TraceEntry", "load_model", "estimate", "estimate_from_size", "COMPONENTS"]

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
class Estimate:
    """Memory needed to train ``model`` with ``settings``, in bytes."""

    weights: int
    lora: int
    optimizer: int
    gradients: int
    activations: int
    overhead: int
    total: int
    params_total: int
    params_trainable: int
    family: str
    profile: str
    model_type: str | None
    settings: TrainingSettings
    lora_targets: tuple
    warnings: tuple
    figures: Mapping[str, int]
    phases: Mapping[str, int]  # peak bytes of each phase of the training step (profiles that model phases)
    model: ModelSpec = field(repr=False, compare=False)
    _profile: Profile = field(repr=False, compare=False)
    _env: Mapping[str, Any] = field(repr=False, compare=False)
    _layer_envs: tuple = field(repr=False, compare=False)

    def min_per_gpu(self, n: int = 1) -> int:
        """Least memory each of ``n`` GPUs needs when the model is split over them (profile formula)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise SettingsError(f"the number of GPUs must be a positive integer, got {n!r}")
        f = self._profile.formula(self._profile.min_per_gpu)
        env = dict(self._env)
        env["n_gpus"] = n
        return round_bytes(f.expr.evaluate(env))

    @property
    def peak_phase(self) -> str | None:
        """The phase of the training step whose peak is highest (None when the profile has no phases)."""
        if not self.phases:
            return None
        return max(self.phases, key=lambda k: self.phases[k])

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
            "figures": dict(self.figures),
            "phases": dict(self.phases),
            "peak_phase": self.peak_phase,
            "lora_targets": list(self.lora_targets),
            "warnings": list(self.warnings),
        }

    def to_gb_dict(self) -> dict[str, float]:
        """Components and total in GiB (2**30 bytes)."""
        out = {c: v / _GIB for c, v in self.components().items()}
        out["total"] = self.total / _GIB
        return out

    @cached_property
    def trace(self) -> tuple:
        """Every formula evaluated for this estimate, in evaluation order."""
        entries = []
        env = self._env
        classes = self.model.layer_classes
        for f in self._profile.formulas:
            if f.scope == "layer":
                for lc, lenv in zip(classes, self._layer_envs):
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
    """Read a model source and resolve it against its family (no training settings involved)."""
    if isinstance(model, ModelSpec):
        return model
    reg = registry or Registry.default()
    root, origin = read_config(model, trust_remote_code=trust_remote_code)
    text = text_view(root)
    types = [text.get("model_type"), root.get("model_type")]
    family, note = reg.family_for(types)
    model_type = next((t for t in types if t), None)
    size, size_origin = checkpoint_size(model)
    return resolve_model(
        family, root, text, model_type=model_type, warnings=[note] if note else [], source=origin,
        checkpoint_bytes=size, checkpoint_origin=size_origin,
    )


def estimate(
    model: Any,
    *,
    method: str = "qlora",
    batch_size: int = 4,
    seq_len: int = 2048,
    lora_rank: int = 16,
    target_modules: Any = None,
    gradient_checkpointing: Any = "unsloth",
    optimizer: str = "adamw_8bit",
    attention: str | None = "flash_attention_2",
    load_in_4bit: bool | None = None,
    loss: str = "standard",
    lora_dropout: float = 0.0,
    profile: str = "unsloth",
    trust_remote_code: bool = False,
    registry: Registry | None = None,
) -> Estimate:
    """Estimate the GPU memory of fine-tuning ``model``.

    ``model`` is a path to a config.json or a model folder, a dict, a transformers
    ``PretrainedConfig``, a hub id, or a :class:`ModelSpec` from :func:`load_model`
    (the fast path when many settings are tried on one model).
    """
    settings = normalise_settings(
        method=method, batch_size=batch_size, seq_len=seq_len, lora_rank=lora_rank,
        target_modules=target_modules, gradient_checkpointing=gradient_checkpointing,
        optimizer=optimizer, attention=attention, load_in_4bit=load_in_4bit, loss=loss, lora_dropout=lora_dropout,
    )
    reg = registry or Registry.default()
    prof = reg.profile(profile)
    if settings.method not in prof.methods:
        raise SettingsError(
            f"profile {prof.name} does not model {settings.method} (it models {', '.join(prof.methods)})"
        )
    spec = load_model(model, trust_remote_code=trust_remote_code, registry=reg)
    reg.check_pair(reg.family(spec.family), prof)
    warnings = list(spec.warnings)
    if settings.method in ("full", "inference"):
        lora, targets = NO_ADAPTERS, frozenset()
    else:
        targets, explicit = prof.expand_targets(settings.target_modules)
        if prof.lora_convention == "peft":
            lora = spec.peft_lora_sums(targets)
        else:
            lora = spec.lora_sums(targets, explicit)
        matched = lora.matched
        unmatched = sorted(targets - matched)
        if unmatched:
            warnings.append(f"LoRA target(s) {', '.join(unmatched)} match no module of this model")
        if not matched:
            warnings.append("no LoRA target matches a module of this model: the adapter is empty")
    return _evaluate(spec, prof, settings, lora, warnings)


def _evaluate(spec: ModelSpec, prof: Profile, settings: TrainingSettings, lora: LoraSums, warnings: list) -> Estimate:
    env, layer_envs = prof.evaluate(spec, settings, lora, warnings)
    comps = {c: env[fid] for c, fid in prof.components.items()}
    return Estimate(
        **comps,
        total=round_bytes(env[prof.total]),
        params_total=spec.params_total,
        params_trainable=round_bytes(env[prof.trainable_params]),
        family=spec.family,
        profile=prof.name,
        model_type=spec.model_type,
        settings=settings,
        lora_targets=tuple(sorted(lora.matched)),
        warnings=tuple(warnings),
        figures={name: env[fid] for name, fid in prof.figures.items()},
        phases={name: env[fid] for name, fid in prof.phases.items()},
        model=spec,
        _profile=prof,
        _env=env,
        _layer_envs=tuple(layer_envs),
    )


def estimate_from_size(
    *,
    params: float | None = None,
    weight_bytes: int | None = None,
    method: str = "qlora",
    batch_size: int = 4,
    seq_len: int = 2048,
    lora_rank: int = 16,
    gradient_checkpointing: Any = "unsloth",
    optimizer: str = "adamw_8bit",
    attention: str | None = "flash_attention_2",
    load_in_4bit: bool | None = None,
    registry: Registry | None = None,
) -> Estimate:
    """The seed's fallback when no config can be read: only a parameter count or the weights' size.

    Every component is a share of the 16-bit model size (profile ``size_only``); the estimate says so.
    """
    if params is None and weight_bytes is None:
        raise SettingsError("give a parameter count (params) or the weights' size in bytes (weight_bytes)")
    for name, value in (("params", params), ("weight_bytes", weight_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise SettingsError(f"{name} must be a positive number, got {value!r}")
    settings = normalise_settings(
        method=method, batch_size=batch_size, seq_len=seq_len, lora_rank=lora_rank, target_modules=None,
        gradient_checkpointing=gradient_checkpointing, optimizer=optimizer, attention=attention,
        load_in_4bit=load_in_4bit,
    )
    reg = registry or Registry.default()
    prof = reg.profile("size_only")
    total = int(params) if params is not None else int(weight_bytes) // 2
    source = f"{params:g} parameters" if params is not None else f"{int(weight_bytes)} bytes of weights"
    names = {
        "params_total": total, "quantizable_params": 0, "non_quantizable_params": total,
        "skipped_quantizable_params": 0, "linear_quantizable_params": 0,
        "checkpoint_bytes": int(weight_bytes) if weight_bytes is not None else None,
        "num_layers": 0,
    }
    spec = ModelSpec(
        family="size_only", family_file="", model_type=None, facts=MappingProxyType({}), num_layers=0,
        layer_classes=(), model_modules=(), source=source,
        _aggregates={"params_total": total, "params_by_group": MappingProxyType({}),
                     "names": MappingProxyType(names), "lora_modules": ()},
    )
    warnings = [f"no model config: a fallback estimate from {source} alone, each component a share of the model size"]
    return _evaluate(spec, prof, settings, NO_ADAPTERS, warnings)
