"""Local inference with a runtime's own defaults: the answers of :mod:`vramwise.answers.offload` (the largest
context, the layers to offload, the parallel sequences, the host memory) where a runtime preset
(:mod:`vramwise.inputs.presets`: Ollama's defaults, its environment variables and a Modelfile's ``PARAMETER``
lines) gives the settings, each with its origin, and the answers are also given in the runtime's names."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from vramwise.answers.fit import fit, gpu_target
from vramwise.answers.offload import LocalFit, is_local
from vramwise.errors import SettingsError
from vramwise.estimation.estimate import load_model
from vramwise.estimation.registry import Registry
from vramwise.models.model import ModelSpec

__all__ = ["LocalFit", "local_fit", "is_local"]


def local_fit(model: Any, *, gpu: Any, headroom: float | None = None, profile: str | None = None,
              preset: str | None = None, modelfile: Any = None, environ: Mapping[str, str] | None = None,
              registry: Registry | None = None, trust_remote_code: bool = False, **settings: Any) -> LocalFit:
    """The local answers for ``model`` (a GGUF file, or a :class:`~vramwise.ModelSpec`) on one ``gpu`` (see
    :func:`~vramwise.answers.fit.gpu_target`) and the host, with ``headroom`` (a share of the GPU kept free;
    None: the device band's, 0 where no published run covers the profile), under ``profile`` (None: the
    preset's, else llama.cpp).

    ``preset`` (``"ollama"``) takes the settings from a runtime's defaults, the variables of ``environ`` (a
    mapping such as ``os.environ``; None: none read) and a ``modelfile`` (a path or a read
    :class:`~vramwise.inputs.presets.Modelfile`), each setting with its origin; the ``settings`` given here
    win over the preset's (their origin: ``given``). A modelfile or environ without a preset takes the
    ``ollama`` one."""
    reg = registry or Registry.default()
    if preset is None and (modelfile is not None or environ is not None):
        preset = "ollama"
    if preset is None:
        prof = reg.profile(profile or "llama.cpp")
        if not is_local(prof):
            raise SettingsError(f"profile {prof.name} is not a local-inference profile (llama.cpp is)")
        return fit(model, gpu=gpu, headroom=headroom, profile=prof.name, registry=reg,
                   trust_remote_code=trust_remote_code, **settings)
    from vramwise.inputs.presets import preset as load_preset, preset_settings

    p = load_preset(preset)
    if profile is not None and profile != p.profile:
        raise SettingsError(f"preset {preset} gives the {p.profile} profile's settings, not {profile}'s")
    target = gpu_target(gpu)
    spec = model if isinstance(model, ModelSpec) else load_model(model, registry=reg, trust_remote_code=trust_remote_code)
    train = spec.facts.get("max_position_embeddings")
    got = preset_settings(preset, modelfile=modelfile, environ=environ,
                          ctx_train=train if isinstance(train, int) and not isinstance(train, bool) else 0,
                          gpu_total=target.memory_bytes)
    out = fit(spec, gpu=target, headroom=headroom, profile=p.profile, registry=reg, **{**got.settings, **settings})
    names = {"n_ctx": out.max_n_ctx, "n_parallel": out.settings["n_parallel"], "n_gpu_layers": out.max_n_gpu_layers}
    shown = () if out.max_n_ctx is None else tuple((option, expr.evaluate(names)) for option, expr in p.answers)
    return replace(out, preset=got, origins={**got.origins, **{name: "given" for name in settings}},
                   in_preset_names=shown)
