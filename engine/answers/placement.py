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

Per GPU means a strategy. :func:`per_gpu_by_strategy` answers "what does each of n GPUs hold" for an
estimate made without one: the same run under each multi-GPU strategy the profile models (the
strategies manifest, ``formulas/strategies/strategies.yaml``), on each of n GPUs, estimated again
through :func:`vramwise.estimate` with ``strategy`` and ``world_size`` set, and the best (least per
GPU; a tie goes to the strategy listed first in the manifest). The profile's own split rule
(``min_per_gpu(n)``) is kept beside them only where it is the profile's placement rule: a profile
that models no strategy, or whose strategies are all the manifest's variants for it (their own
totals, not the rank's step of the profile), as the unsloth profile's documented split
(docs/unsloth-profile.md#multi-gpu) beside its DDP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from vramwise.errors import SettingsError

__all__ = ["GpuSet", "pooled_bytes", "fits", "spare_per_gpu", "rule_text", "InferenceSplit", "inference_split", "per_gpu_bytes",
           "StrategyPerGpu", "PerGpuByStrategy", "per_gpu_by_strategy"]


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


@dataclass(frozen=True)
class StrategyPerGpu:
    """One strategy on ``count`` GPUs: the bytes each GPU (the busiest rank) needs, or why the strategy
    refuses the run's settings there (``per_gpu`` None)."""

    strategy: str
    count: int
    per_gpu: int | None
    refused: str | None = None

    def to_dict(self) -> dict:
        return {"strategy": self.strategy, "per_gpu": self.per_gpu, "refused": self.refused}


@dataclass(frozen=True)
class PerGpuByStrategy:
    """What each GPU holds for each GPU count (``counts``) under each multi-GPU strategy the profile
    models (``strategies``, in the manifest's order; ``cells``: one per strategy and count, strategy by
    strategy), the best of each count (``best``: ``(count, strategy or None)``, None where every strategy
    refuses), and the profile's split rule where it is kept (``split_rule``: ``(count, bytes)``;
    ``split_rule_text``: what the profile's ``min_per_gpu`` formula says it is)."""

    counts: tuple[int, ...]
    strategies: tuple[str, ...]
    cells: tuple[StrategyPerGpu, ...]
    best: tuple[tuple[int, str | None], ...]
    split_rule: tuple[tuple[int, int], ...] = ()
    split_rule_text: str = ""

    def cell(self, strategy: str, count: int) -> StrategyPerGpu:
        """The figure of ``strategy`` on ``count`` GPUs."""
        for c in self.cells:
            if c.strategy == strategy and c.count == count:
                return c
        raise KeyError((strategy, count))

    def best_of(self, count: int) -> StrategyPerGpu | None:
        """The best strategy's figure on ``count`` GPUs (None: every strategy refuses, or there are none)."""
        name = dict(self.best)[count]
        return None if name is None else self.cell(name, count)

    def to_dict(self) -> dict:
        """Plain data: for each count (as a string key) the best strategy and each strategy's bytes or refusal,
        and the split rule's bytes by count where it is kept (else None)."""
        return {
            "strategies": list(self.strategies),
            "counts": {str(n): {"best": dict(self.best)[n],
                                "per_gpu": {c.strategy: c.per_gpu for c in self.cells if c.count == n and c.refused is None},
                                "refused": {c.strategy: c.refused for c in self.cells if c.count == n and c.refused is not None}}
                       for n in self.counts},
            "split_rule": {str(n): b for n, b in self.split_rule} if self.split_rule else None,
            "split_rule_text": self.split_rule_text or None,
        }


def _registry(registry: Any) -> Any:
    if registry is not None:
        return registry
    from vramwise.estimation.registry import Registry

    return Registry.default()


def per_gpu_by_strategy(est: Any, counts: Iterable[int], *, registry: Any = None) -> PerGpuByStrategy:
    """What each of n GPUs holds, for each n of ``counts``, under each multi-GPU strategy the profile of
    ``est`` models, and the best of each count (least per GPU; a tie goes to the strategy listed first in
    the strategies manifest).

    Each figure is ``vramwise.estimate(model, profile, **est's settings, strategy=s, world_size=n).total``
    (the estimate's offload, gpus_per_node and the rest unchanged), so at most strategies x counts
    estimates are made; a strategy that refuses the settings on n GPUs (a
    :class:`~vramwise.errors.SettingsError`: fewer GPUs than it spreads over, a method its stack does not
    run on several GPUs) is kept with its refusal. ``est`` made under a strategy: that strategy only.
    Inference is not trained, so it has no strategies. The profile's split rule (``min_per_gpu(n)``) is
    kept where the profile models no strategy, or only the manifest's variants for it (module docstring).
    ``registry``: the one ``est`` was made with (default: :meth:`Registry.default`)."""
    from vramwise.estimation.estimate import estimate

    counts = tuple(dict.fromkeys(counts))
    for n in counts:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise SettingsError(f"the number of GPUs must be a positive integer, got {n!r}")
    reg = _registry(registry)
    settings = est.settings.to_dict()
    if est.strategy is not None:
        strategies = (est.strategy,)
    elif settings["method"] == "inference" or est.serving is not None:
        strategies = ()
    else:
        strategies = tuple(reg.strategies_of(est.profile))
    cells, best = [], []
    for s in strategies:
        for n in counts:
            try:
                got = estimate(est.model, profile=est.profile, registry=reg, **{**settings, "strategy": s, "world_size": n})
            except SettingsError as e:
                cells.append(StrategyPerGpu(s, n, None, str(e)))
            else:
                cells.append(StrategyPerGpu(s, n, got.total))
    for n in counts:
        ran = [c for c in cells if c.count == n and c.per_gpu is not None]
        best.append((n, min(ran, key=lambda c: c.per_gpu).strategy if ran else None))  # min keeps the first of a tie
    own = [s for s in strategies if est.profile not in (reg.strategy_info(s).get("variants") or {})]
    split, text = (), ""
    if est.strategy is None and not own:
        prof = est.profile_data
        split = tuple((n, est.min_per_gpu(n)) for n in counts)
        text = " ".join(prof.formula(prof.min_per_gpu).description.split())
    return PerGpuByStrategy(counts, strategies, tuple(cells), tuple(best), split, text)
