"""The answers of local inference (a profile that splits a GGUF model between the GPUs and the host, ``llama.cpp``):
the largest context the GPU holds, the layers to offload at a context, the parallel sequences a context allows,
and the host memory a partial offload takes. :func:`vramwise.fit` gives them for such a profile;
:func:`vramwise.answers.local.local_fit` also takes a runtime preset's settings (Ollama's).

Every figure is an :func:`~vramwise.estimate` of the profile: its per-device figures (``gpu_total``,
``host_total``, ``n_ctx``, ``n_ctx_seq``, ``n_stream``, ``offloaded_layers``) are read, nothing is re-derived. A
profile gets these answers when its figures name all of :data:`LOCAL_FIGURES` (data, not its name). The searches
are :mod:`vramwise.answers.search`'s: more context, more offloaded layers or more sequences never take less GPU
memory, and each answer is checked (it fits, the next value does not). The context is searched over every whole
number of tokens, so the answer is the largest one the profile's own padding of ``n_ctx`` lets fit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from typing import Callable

from vramwise.answers.search import largest, largest_below
from vramwise.estimation.estimate import Estimate, estimate
from vramwise.estimation.registry import Registry
from vramwise.models.model import ModelSpec
from vramwise.profiles.settings import LIMITS

__all__ = ["LocalFit", "local_answers", "is_local", "LOCAL_FIGURES"]

#: The figures a profile's estimate must give for the local answers (per device, the context, the layers).
#: ``gpu_total`` is the largest GPU's need where the model is split over several (``gpus``, ``gpu{g}_total``).
LOCAL_FIGURES = ("gpu_total", "host_total", "n_ctx", "n_ctx_seq", "n_stream", "offloaded_layers")


def is_local(prof) -> bool:
    """Whether a profile gets the local answers: its figures name every one of :data:`LOCAL_FIGURES`."""
    return all(name in prof.figures for name in LOCAL_FIGURES)


@dataclass(frozen=True)
class LocalFit:
    """What the GPUs and the host hold of a local-inference run (a GGUF model under ``llama.cpp``): one GPU, or
    ``gpus`` of one kind the model is split over, each judged against ``usable_bytes`` (every GPU must fit; the
    answers are those of the GPU that holds the most).

    ``max_n_ctx`` is the largest ``n_ctx`` that fits the GPU at the other settings (capped at the model's
    training context per sequence, ``n_ctx_cap``, where memory allows more: ``max_n_ctx_memory``);
    ``max_n_gpu_layers`` the most layers ``n_gpu_layers`` may put on the GPU at the settings' context (counted as
    llama.cpp counts them, the output layer included: ``layers + 1`` is all of them), with the host memory that
    takes (``host_bytes_at_max_layers``); ``max_n_parallel`` the most sequences that each hold ``slot_ctx``
    cells at once (the context per sequence of the settings; ``n_ctx`` grows with them)."""

    gpu: Any  # vramwise.answers.fit.GpuTarget
    profile: str
    settings: Mapping[str, Any]
    estimate: Estimate
    headroom: float
    usable_bytes: int
    verdict: Any  # vramwise.answers.fit.Verdict
    fits: bool
    layers: int  # repeating layers of the model (n_gpu_layers = layers + 1 puts all of them and the output on the GPU)
    max_n_ctx: int | None  # None: not even one token of context fits
    max_n_ctx_memory: int | None  # what memory alone allows
    n_ctx_cap: int | None  # the training context per sequence x the KV streams (None: the model states none)
    max_n_gpu_layers: int  # 0: nothing fits on the GPU, the whole model on the host
    gpu_bytes_at_max_layers: int
    host_bytes_at_max_layers: int
    slot_ctx: int
    max_n_parallel: int | None  # None: one sequence of slot_ctx does not fit
    notes: tuple = ()
    preset: Any = None  # vramwise.inputs.presets.PresetSettings, where a runtime's preset gave the settings
    origins: Mapping[str, str] | None = None  # setting -> where its value comes from (a preset's, or "given")
    in_preset_names: tuple = ()  # ((option, value), ...): the answers in the preset's own names

    @property
    def gpus(self) -> int:
        """The GPUs the model is split over (the profile's ``gpus`` figure; 1 where it gives none)."""
        return self.estimate.figures.get("gpus", 1)

    @property
    def per_gpu(self) -> tuple:
        """Each GPU's total at the settings (the profile's ``gpu{g}_total`` figures, GPU 0 first), the verdict
        being the largest's: every GPU must fit. One GPU: (gpu_total,)."""
        f = self.estimate.figures
        if self.gpus == 1 or f"gpu{self.gpus - 1}_total" not in f:
            return (f["gpu_total"],)
        return tuple(f[f"gpu{g}_total"] for g in range(self.gpus))

    @property
    def all_layers(self) -> bool:
        return self.max_n_gpu_layers >= self.layers + 1

    def to_dict(self) -> dict:
        f = self.estimate.figures
        return {
            "gpu": self.gpu.to_dict(), "profile": self.profile, "settings": dict(self.settings),
            "headroom": self.headroom, "usable_bytes": self.usable_bytes, "verdict": self.verdict.to_dict(),
            "fits": self.fits, "gpu_total": f["gpu_total"], "host_total": f["host_total"], "layers": self.layers,
            "gpus": self.gpus, "per_gpu": [{"gpu": g, "total": t, "fits": t <= self.usable_bytes}
                                           for g, t in enumerate(self.per_gpu)],
            "max_n_ctx": self.max_n_ctx, "max_n_ctx_memory": self.max_n_ctx_memory, "n_ctx_cap": self.n_ctx_cap,
            "max_n_gpu_layers": self.max_n_gpu_layers, "all_layers": self.all_layers,
            "gpu_bytes_at_max_layers": self.gpu_bytes_at_max_layers,
            "host_bytes_at_max_layers": self.host_bytes_at_max_layers,
            "slot_ctx": self.slot_ctx, "max_n_parallel": self.max_n_parallel, "notes": list(self.notes),
            "preset": self.preset.to_dict() if self.preset is not None else None,
            "origins": dict(self.origins) if self.origins is not None else None,
            "in_preset_names": dict(self.in_preset_names), "figures": dict(f), "warnings": list(self.estimate.warnings),
        }


def local_answers(spec: ModelSpec, profile: str, target: Any, settings: Mapping[str, Any], reg: Registry, *,
                  headroom_of: Callable[[Estimate], tuple], verdict_type: Callable) -> LocalFit:
    """The local answers on ``target`` (a :class:`~vramwise.answers.fit.GpuTarget`, one GPU) at ``settings``:
    ``headroom_of`` gives the headroom of the estimate at the settings (share, source, words) and ``verdict_type``
    builds the verdict (:class:`~vramwise.answers.fit.Verdict`), as :func:`~vramwise.fit` does for training."""
    def est(**changes) -> Estimate:
        return estimate(spec, profile=profile, registry=reg, **{**settings, **changes})

    here = est()
    headroom, source, why = headroom_of(here)
    usable = int(target.memory_bytes * (1 - headroom))

    def fits(e: Estimate) -> bool:
        return e.figures["gpu_total"] <= usable

    f = here.figures
    gpu = f["gpu_total"]
    label = "fits" if gpu <= usable else "tight" if gpu <= target.memory_bytes else "does not fit"
    verdict = verdict_type(label, target.memory_bytes - gpu, target.memory_bytes, float(headroom), source, why)
    notes = []
    # the context: every whole number of tokens (the profile pads it), then the cap per sequence
    memory = largest(lambda n: fits(est(n_ctx=n)), LIMITS["n_ctx"])
    train = spec.facts.get("max_position_embeddings")
    cap = train * f["n_stream"] if isinstance(train, int) and not isinstance(train, bool) and train > 0 else None
    best = memory
    if cap is not None and memory is not None and memory > cap:
        best = cap
        notes.append(f"largest n_ctx capped at the model's training context of {train:,} tokens per sequence "
                     f"({f['n_stream']} KV stream{'s' if f['n_stream'] != 1 else ''}: {cap:,}); memory alone allows "
                     f"{memory:,}")
    # the layers: n_gpu_layers from 1 to every layer and the output layer (0 puts nothing on the GPU)
    layers = est(n_gpu_layers=None).figures["offloaded_layers"]
    most = largest_below(lambda k: fits(est(n_gpu_layers=k)), layers + 1) or 0
    at = est(n_gpu_layers=most)
    # the sequences: each holds the settings' cells per sequence; n_ctx grows with them
    slot = f["n_ctx_seq"]
    top = max(1, min(LIMITS["n_parallel"], LIMITS["n_ctx"] // max(slot, 1)))
    slots = largest(lambda p: fits(est(n_parallel=p, n_ctx=slot * p)), top)
    return LocalFit(
        gpu=target, profile=profile, settings=here.settings.to_dict(), estimate=here, headroom=float(headroom),
        usable_bytes=usable, verdict=verdict, fits=label == "fits", layers=layers, max_n_ctx=best,
        max_n_ctx_memory=memory, n_ctx_cap=cap, max_n_gpu_layers=most,
        gpu_bytes_at_max_layers=at.figures["gpu_total"], host_bytes_at_max_layers=at.figures["host_total"],
        slot_ctx=slot, max_n_parallel=slots, notes=tuple(notes),
    )
