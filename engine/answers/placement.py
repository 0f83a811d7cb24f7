"""Where an estimate's bytes go on GPUs: the one rule for "fits on n GPUs", and the per-GPU figures.

Every answer and surface that says whether a run fits, or what each GPU holds, asks here:
``fit`` and ``compare`` (:mod:`vramwise.answers.fit`), ``select_gpus``
(:mod:`vramwise.answers.selection`), and the views the command line and the web page show
(:mod:`vramwise.surfaces.views`). Nothing here re-derives memory: the figures are the estimate's
(its total, ``min_per_gpu(n)`` from the profile's per-GPU formula, the ``kv_cache`` and
``kv_cache_total`` figures); this module only places them.

The rule (docs/unsloth-profile.md#multi-gpu). A run fits on a set of GPUs when

1. each GPU of the set has at least the per-GPU minimum for that many GPUs
   (``Estimate.min_per_gpu(n)``), and
2. without a multi-GPU strategy, the pooled memory covers the estimate's total: the first GPU's
   memory in full plus the profile's ``further_gpu_share`` (0.85 in the bundled profiles) of
   the others' together.

With a strategy the strategy places the model: ``min_per_gpu(n)`` is what one rank holds on its
own GPU, and condition 1 alone decides.

Example, by hand: two GPUs of 40 and 30 GiB (the first counted in full) pool
40 + 0.85 x 30 = 65.5 GiB; a run of 60 GiB in all and 31 GiB per GPU on two fits only if the
smaller GPU holds 31 GiB, which 30 GiB does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

__all__ = ["GpuSet", "pooled_bytes", "fits", "spare_per_gpu", "rule_text", "InferenceSplit", "inference_split", "per_gpu_bytes"]


@dataclass(frozen=True)
class GpuSet:
    """GPUs a run may use, as the rule sees them (bytes): how many, the smallest one's memory, the
    memory of the one counted in full, and the others' memory together."""

    count: int
    smallest: int
    first: int
    further: int

    @classmethod
    def alike(cls, memory: int, count: int) -> "GpuSet":
        """``count`` GPUs of ``memory`` bytes each."""
        return cls(count, memory, memory, memory * (count - 1))

    @classmethod
    def of(cls, memories: Sequence[int]) -> "GpuSet":
        """GPUs of the given memories, the first counted in full (a selection's best GPU first)."""
        memories = list(memories)
        if not memories:
            raise ValueError("a set of GPUs needs at least one GPU")
        return cls(len(memories), min(memories), memories[0], sum(memories[1:]))


def pooled_bytes(gpus: GpuSet, share: float) -> float:
    """The memory a set of GPUs offers a run that is not sharded: the first GPU's in full plus
    ``share`` of the others' together."""
    return gpus.first + share * gpus.further


def fits(est: Any, gpus: GpuSet, share: float) -> bool:
    """Whether ``est`` fits on ``gpus`` by the rule of this module (``share``: the profile's
    ``further_gpu_share``). ``est`` is an :class:`~vramwise.Estimate`, or anything with ``total``,
    ``min_per_gpu(n)`` and optionally ``strategy``."""
    if est.min_per_gpu(gpus.count) > gpus.smallest:
        return False
    if getattr(est, "strategy", None) is not None:  # the strategy places the model: each GPU holds one rank
        return True
    return est.total <= pooled_bytes(gpus, share)


def spare_per_gpu(est: Any, gpus: GpuSet) -> int:
    """Bytes the smallest GPU of ``gpus`` has left over the per-GPU minimum (negative: short by that much)."""
    return gpus.smallest - est.min_per_gpu(gpus.count)


def rule_text(strategy: str | None, count: int, usable: int, share: float) -> str:
    """The rule in words for ``count`` GPUs of ``usable`` bytes each (what ``Fit.rule`` says)."""
    if strategy is not None:
        return f"fits when each of the {count} rank(s) of strategy {strategy} needs at most {usable:,} bytes"
    return (f"fits when the per-GPU minimum for {count} GPU(s) is at most {usable:,} bytes"
            + (f" and {usable:,} x (1 + {share} x {count - 1}) covers the total" if count > 1 else " and the total fits"))


@dataclass(frozen=True)
class InferenceSplit:
    """The inference answer: the weights, the KV cache of the batch and the profile's overhead
    (together the ``kv_cache_total`` figure); ``rule_total`` is the profile's own inference rule
    (weights plus a fixed headroom, no KV cache), the estimate's total."""

    weights: int
    kv_cache: int
    overhead: int
    total: int
    rule_total: int

    def per_gpu(self, n: int) -> int:
        """What each of ``n`` GPUs holds: the weights and KV cache split evenly (rounded up to a
        whole byte), the overhead on every GPU."""
        return -(-(self.weights + self.kv_cache) // n) + self.overhead


def inference_split(est: Any) -> InferenceSplit | None:
    """The :class:`InferenceSplit` of an inference estimate whose profile reports the KV cache
    (``kv_cache`` and ``kv_cache_total`` figures); None otherwise."""
    if est.settings.method != "inference":
        return None
    figures = est.figures
    total, cache = figures.get("kv_cache_total"), figures.get("kv_cache")
    if not total or cache is None:
        return None
    return InferenceSplit(weights=est.weights, kv_cache=cache, overhead=total - est.weights - cache, total=total,
                          rule_total=est.total)


def per_gpu_bytes(est: Any, counts: Iterable[int]) -> dict[int, int]:
    """What each GPU holds when the run is spread over n GPUs, for each n of ``counts``.

    Inference with a KV cache: the split of :class:`InferenceSplit`. A multi-GPU strategy runs on
    its world size only: ``{world_size: the rank's total}``. Otherwise the profile's per-GPU
    minimum, ``min_per_gpu(n)``."""
    split = inference_split(est)
    if split is not None:
        return {n: split.per_gpu(n) for n in counts}
    if est.strategy is not None:
        return {est.world_size: est.total}
    return {n: est.min_per_gpu(n) for n in counts}
