"""What a runtime loads beside the model: a draft model for speculative decoding and a multimodal projector.

llama-server loads a draft model (``--model-draft``) as a second ``llama_model`` with a ``llama_context`` of its
own (llama.cpp 0c1e5709, common/speculative.cpp:2446-2550): the model's settings, with the draft's own
``n_gpu_layers`` and cache types, and the model's context (``cparams.n_ctx = llama_n_ctx(ctx_tgt)``, the padded
n_ctx). Its figures are the profile's own formulas evaluated on the draft's file at those settings (a stage of
its own, kept by the registry as any other); each device's share goes into the model's estimate as the derived
names of :data:`~vramwise.profiles.settings.DRAFT_NAMES`, which the profile's formula files add to each device's
total (formulas/llama.cpp/companions.yaml, total.yaml). A projector (``--mmproj``) is read as a GGUF header: its
tensors' bytes, ``mmproj_weights_bytes``, placed by the formula files.

A profile takes part by reading the settings (``model_draft``, ``mmproj``) in its formulas; nothing here knows
a model's family.
"""

from __future__ import annotations

from typing import Any, Callable

from vramwise.errors import ConfigError, InternalError, SettingsError
from vramwise.profiles.settings import SETTINGS

__all__ = ["companion_values", "DRAFT_SETTINGS"]

#: The model's setting -> the draft's setting that replaces it for the draft's context (common/speculative.cpp:2463-2479
#: at 0c1e5709: result.n_gpu_layers = params_spec.n_gpu_layers, result.cache_type_k / _v = params_spec.cache_type_k / _v).
DRAFT_SETTINGS = {"n_gpu_layers": "n_gpu_layers_draft", "cache_type_k": "cache_type_k_draft",
                  "cache_type_v": "cache_type_v_draft"}
#: The companions' own settings: a draft is loaded without a draft or a projector of its own.
_COMPANION_SETTINGS = {"model_draft": None, "mmproj": None, "mmproj_offload": True, "n_gpu_layers_draft": None,
                       "cache_type_k_draft": "f16", "cache_type_v_draft": "f16"}
#: The formula of the model's context the draft's context takes (llama_n_ctx: the padded n_ctx, kv_cache.yaml).
_CONTEXT = "ctx_cells"
_GPUS = 8


def _draft_names(env: dict) -> dict:
    """The derived names of DRAFT_NAMES from the draft's evaluated formulas (the profile's own ids)."""
    try:
        out = {f"draft_gpu{i}_bytes": env[f"gpu{i}_weights_bytes"] + env[f"gpu{i}_kv_bytes"] + env[f"gpu{i}_rs_bytes"]
               for i in range(_GPUS)}
        out["draft_host_bytes"] = (env["host_weights_bytes"] + env["host_kv_bytes"] + env["host_rs_bytes"]
                                   + env["output_buffer_bytes"])
        out["draft_gpu_weights_bytes"] = env["gpu_weights_bytes"]
        out["draft_host_weights_bytes"] = env["host_weights_bytes"]
        out["draft_gpu_kv_bytes"] = env["gpu_kv_bytes"] + env["gpu_rs_bytes"]
        out["draft_host_kv_bytes"] = env["host_kv_bytes"] + env["host_rs_bytes"]
        out["draft_output_bytes"] = env["output_buffer_bytes"]
    except KeyError as e:
        raise InternalError(f"the profile reads model_draft but has no formula {e.args[0]!r} of a model's per-device "
                            "figures to take the draft's from") from None
    return {k: int(v) for k, v in out.items()}


def _with(error: Exception, setting: str) -> Exception:
    return type(error)(f"the draft model ({setting}): {error}")


def companion_values(reg, spec, prof, static: dict, warnings: list, stage: Callable) -> dict:
    """The derived names of the companions ``static`` names (model_draft, mmproj) for ``spec`` under ``prof``,
    each 0 where its setting is unset or the profile does not read it; the draft's own warnings are appended to
    ``warnings``, each saying it is the draft's. ``stage(spec, settings)``: the estimate's stage of a model at
    ``settings`` (raw, normalised by the estimate) under ``prof``."""
    out: dict[str, Any] = {}
    read = prof.settings_read
    if static.get("mmproj") is not None and "mmproj" in read:
        from vramwise.inputs.gguf import read_projector

        out["mmproj_weights_bytes"] = read_projector(static["mmproj"]).weight_bytes
    path = static.get("model_draft")
    if path is None or "model_draft" not in read:
        return out
    given = {s.name: static[s.name] for s in SETTINGS if not s.per_call}
    bare = {**given, **_COMPANION_SETTINGS}
    main = stage(spec, bare)
    draft_given = {**bare, "n_ctx": main.env[_CONTEXT], **{k: static[v] for k, v in DRAFT_SETTINGS.items()}}
    try:
        draft_spec = reg.model(path)
        draft = stage(draft_spec, draft_given)
    except (ConfigError, SettingsError) as e:
        raise _with(e, "model_draft") from None
    env, _ = draft.full_env(1, 1, draft.run(1, 1))
    out.update(_draft_names(env))
    warnings.extend(f"draft model: {w}" for w in draft.warnings if w not in draft_spec.warnings)
    return out

