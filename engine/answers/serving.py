"""Answers for a serving profile (``vllm``): what context and concurrency a GPU holds.

A serving engine fills the memory it is given with KV cache, so "does it fit" means "does the server
start": the answers are the largest ``max_model_len`` that starts, the concurrency at a context
length, the ``gpu_memory_utilization`` a length needs, and how the KV capacity grows with the tensor
parallel size. Every figure is an :func:`~vramwise.estimate` of the serving profile (its
``serving`` figures, :attr:`Estimate.serving`); nothing is re-derived here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from vramwise.answers.search import fewest
from vramwise.errors import SettingsError, VramwiseError
from vramwise.estimation.estimate import Estimate, estimate
from vramwise.models.model import ModelSpec
from vramwise.profiles.profile import Profile

__all__ = ["ServingFit", "serving_fit", "TP_SIZES", "UTILIZATIONS"]

#: Tensor-parallel sizes the capacity table tries.
TP_SIZES = (1, 2, 4, 8)
#: gpu_memory_utilization values the capacity curve tries: 0.50, 0.55 ... 1.00.
UTILIZATIONS = tuple(k / 20 for k in range(10, 21))
#: gpu_memory_utilization is searched in hundredths (vLLM's examples give it to two decimals).
_STEPS = 100


@dataclass(frozen=True)
class ServingFit:
    """What a serving profile answers for one model, GPU and settings."""

    gpu: Any  # vramwise.answers.fit.GpuTarget
    profile: str
    settings: Mapping[str, Any]
    estimate: Estimate
    starts: bool
    kv_cache_tokens: int
    max_concurrency: float  # requests of max_model_len tokens the cache holds at once
    max_model_len: int  # the context asked about (the model's own when none was given)
    largest_max_model_len: int | None  # the largest context that starts (None: none does)
    utilization_needed: float | None  # the smallest gpu_memory_utilization (in hundredths) that starts at max_model_len
    by_tp_size: tuple  # ((tensor_parallel_size, kv_cache_tokens or None, largest_max_model_len or None, problem), ...)
    by_utilization: tuple = ()  # ((gpu_memory_utilization, kv_cache_tokens, starts), ...) at these settings

    def to_dict(self) -> dict:
        return {
            "gpu": self.gpu.to_dict(), "profile": self.profile, "settings": dict(self.settings),
            "starts": self.starts, "kv_cache_tokens": self.kv_cache_tokens, "max_concurrency": self.max_concurrency,
            "max_model_len": self.max_model_len, "largest_max_model_len": self.largest_max_model_len,
            "utilization_needed": self.utilization_needed,
            "by_tp_size": [{"tensor_parallel_size": tp, "kv_cache_tokens": tokens, "largest_max_model_len": longest,
                            "problem": problem} for tp, tokens, longest, problem in self.by_tp_size],
            "by_utilization": [{"gpu_memory_utilization": share, "kv_cache_tokens": tokens, "starts": ok}
                               for share, tokens, ok in self.by_utilization],
            "figures": self.estimate.figures, "warnings": list(self.estimate.warnings),
            "error_band": self.estimate.error_band.to_dict(),
        }


def serving_fit(spec: ModelSpec, prof: Profile, target: Any, settings: Mapping[str, Any], registry) -> ServingFit:
    """The serving answers on ``target`` (a :class:`~vramwise.answers.fit.GpuTarget`: its memory is the
    ``gpu_memory`` of every estimate) at ``settings``."""
    if settings.get("gpu") is not None or settings.get("gpu_memory") not in (None, target.memory_bytes):
        raise SettingsError("fit takes the GPU as its gpu argument (--gpu): leave the gpu and gpu_memory settings out")
    base = {**settings, "gpu": None, "gpu_memory": target.memory_bytes, "method": "inference"}

    def est(**changes) -> Estimate:
        return estimate(spec, profile=prof.name, registry=registry, **{**base, **changes})

    here = est()
    got = here.serving
    length = here.figures.get("max_model_len") or here.settings.max_model_len

    def starts_at(pct: int) -> bool:
        return est(gpu_memory_utilization=pct / _STEPS).serving["starts"]

    pct = fewest(starts_at, _STEPS)
    rows = []
    for tp in TP_SIZES:
        try:
            g = est(tensor_parallel_size=tp).serving
            rows.append((tp, g["kv_cache_tokens"] if g["starts"] else None, g["largest_max_model_len"], None))
        except VramwiseError as exc:  # a size the model cannot be split into: said per row
            rows.append((tp, None, None, str(exc)))
    # the KV capacity as the share vLLM takes grows (tokens even where it does not start: the cache is
    # then smaller than one request of max_model_len, or empty)
    shares = tuple((share, g["kv_cache_tokens"], g["starts"])
                   for share, g in ((u, est(gpu_memory_utilization=u).serving) for u in UTILIZATIONS))
    return ServingFit(
        gpu=target, profile=prof.name, settings=here.settings.to_dict(), estimate=here, starts=got["starts"],
        kv_cache_tokens=got["kv_cache_tokens"], max_concurrency=got["max_concurrency"], max_model_len=length,
        largest_max_model_len=got["largest_max_model_len"], utilization_needed=None if pct is None else pct / _STEPS,
        by_tp_size=tuple(rows), by_utilization=shares,
    )
