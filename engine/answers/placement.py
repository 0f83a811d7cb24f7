"""Where an estimate's bytes go on GPUs: the one rule for "fits on n GPUs", and the per-GPU figures.

Every answer and surface that says whether a run fits, or what each GPU holds, asks here:
``fit`` and ``compare`` (:mod:`vramwise.answers.fit`), ``select_gpus``
(:mod:`vramwise.answers.selection`), and the views the command line and the web page show
(:mod:`vramwise.surfaces.views`). Nothing here re-derives memory: the figures are the estimate's
(its total, ``min_per_gpu(n)`` from the profile's per-GPU formula, the ``kv_cache`` and
``kv_cache_total`` figures); this module only places them.

The rule (docs/unsloth-profile.md#multi-gpu, docs/fit-advice.md). A run fits on a set of GPUs when

1. each GPU of the set has at least what the run places on each of that many GPUs
   (:meth:`Placer.place`), and
2. placed by the profile's split rule (no strategy), the pooled memory covers the estimate's total:
   the first GPU's memory in full plus the profile's ``further_gpu_share`` (0.85 in the bundled
   profiles) of the others' together.

What each GPU holds: under the run's strategy, ``min_per_gpu(n)``, what one rank holds on its own
GPU, and condition 1 alone decides. Without a strategy on one GPU, ``min_per_gpu(1)``. Without a
strategy on several GPUs, the best strategy's figure (:func:`per_gpu_by_strategy`: the least per GPU
of the strategies the profile models, each estimated on n GPUs), condition 1 alone deciding too: the
strategy places the model; the profile's split rule (``min_per_gpu(n)``, an ideal split no strategy
reaches) only where it is the profile's own placement (below), with condition 2. :func:`fits` is the
rule for an estimate taken at its word (its ``min_per_gpu``); :class:`Placer` is the rule every answer
applies.

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
           "StrategyPerGpu", "PerGpuByStrategy", "per_gpu_by_strategy", "Placement", "Placer"]


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


def rule_text(strategy: str | None, count: int, usable: int, share: float, best: str | None = None) -> str:
    """The rule in words for ``count`` GPUs of ``usable`` bytes each (what ``Fit.rule`` says); ``best``: the
    best strategy, where it places a run made without one (:class:`Placer`)."""
    if strategy is not None:
        return f"fits when each of the {count} rank(s) of strategy {strategy} needs at most {usable:,} bytes"
    if best is not None:
        return (f"fits when the best strategy the profile models on {count} GPUs (the least per GPU: {best}) needs "
                f"at most {usable:,} bytes on each")
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


def _strategies(est: Any, reg: Any) -> tuple[tuple[str, ...], bool]:
    """The strategies :func:`per_gpu_by_strategy` estimates ``est`` under, and whether the profile's split rule
    is kept beside them (its own placement: no strategy of the profile's own, only the manifest's variants)."""
    if est.strategy is not None:
        return (est.strategy,), False
    if est.settings.method == "inference" or est.serving is not None:
        strategies: tuple[str, ...] = ()
    else:
        strategies = tuple(reg.strategies_of(est.profile))
    own = [s for s in strategies if est.profile not in (reg.strategy_info(s).get("variants") or {})]
    return strategies, not own


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
    strategies, keeps_split = _strategies(est, reg)
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
    split, text = (), ""
    if keeps_split:
        prof = est.profile_data
        split = tuple((n, est.min_per_gpu(n)) for n in counts)
        text = " ".join(prof.formula(prof.min_per_gpu).description.split())
    return PerGpuByStrategy(counts, strategies, tuple(cells), tuple(best), split, text)


@dataclass(frozen=True)
class Placement:
    """What each of ``count`` GPUs holds of a run and what places it there (:meth:`Placer.place`).

    ``strategy``: the run's own strategy (``best`` false), or, for a run made without one on several GPUs, the
    best of the strategies the profile models (``best`` true: the least per GPU of :func:`per_gpu_by_strategy`);
    None where the profile's split rule places it (one GPU, or a profile whose placement is its split rule),
    and the pooled memory must then cover ``total`` too. ``per_gpu`` None: every strategy refuses the run on
    ``count`` GPUs (``refused``: the first refusal), so it does not run there."""

    count: int
    per_gpu: int | None
    total: int
    strategy: str | None = None
    best: bool = False
    refused: str | None = None

    def fits(self, gpus: GpuSet, share: float) -> bool:
        """The rule of this module on ``gpus`` (``share``: the profile's ``further_gpu_share``): each GPU holds
        the per-GPU figure and, placed by the split rule, the pooled memory covers the total."""
        if self.per_gpu is None or self.per_gpu > gpus.smallest:
            return False
        return self.strategy is not None or self.total <= pooled_bytes(gpus, share)

    def spare(self, smallest: int) -> int | None:
        """Bytes a GPU of ``smallest`` bytes has left over the per-GPU figure (negative: short; None: refused)."""
        return None if self.per_gpu is None else smallest - self.per_gpu

    @property
    def words(self) -> str:
        """`` with device_map`` where the best strategy places the run, else nothing."""
        return f" with {self.strategy}" if self.best else ""

    def to_dict(self) -> dict:
        return {"count": self.count, "per_gpu": self.per_gpu, "strategy": self.strategy, "best": self.best,
                "refused": self.refused}


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


class Placer:
    """Places runs on GPUs for one answer (:meth:`place`), remembering each (run's settings, GPU count) it
    placed: the searches of an answer estimate a run under each strategy once. Made per answer (fit, its
    advice, a GPU selection), never shared between answers: it holds the estimates' model."""

    def __init__(self, registry: Any = None):
        self._registry = registry
        self._placed: dict = {}

    def place(self, est: Any, n: int) -> Placement:
        """What each of ``n`` GPUs holds of ``est``: under its strategy, the rank's figure
        (``est.min_per_gpu(n)``); without one on one GPU, ``min_per_gpu(1)``; without one on several GPUs,
        the best strategy's figure (:func:`per_gpu_by_strategy`), or the profile's split rule
        (``min_per_gpu(n)``) where that is the profile's own placement (it models no strategy of its own).
        A stand-in without a profile (anything with ``total`` and ``min_per_gpu``) is placed by its
        ``min_per_gpu``."""
        strategy = getattr(est, "strategy", None)
        if strategy is not None or n == 1 or getattr(est, "profile_data", None) is None:
            return Placement(n, est.min_per_gpu(n), est.total, strategy)
        key = (id(est.model), est.profile, tuple((k, _hashable(v)) for k, v in est.settings.to_dict().items()), n)
        got = self._placed.get(key)
        if got is None:
            reg = self._registry = _registry(self._registry)
            if _strategies(est, reg)[1]:
                got = Placement(n, est.min_per_gpu(n), est.total)
            else:
                answer = per_gpu_by_strategy(est, (n,), registry=reg)
                cell = answer.best_of(n)
                if cell is None:
                    why = next((c.refused for c in answer.cells if c.refused), "the profile models no strategy")
                    got = Placement(n, None, est.total, refused=why)
                else:
                    got = Placement(n, cell.per_gpu, est.total, cell.strategy, best=True)
            self._placed[key] = (got, est.model)
            return got
        return got[0]

    def by_strategy(self, est: Any) -> bool:
        """Whether :meth:`place` places ``est`` on several GPUs by a strategy (its own, or the best the profile
        models), not by the profile's split rule."""
        if getattr(est, "strategy", None) is not None:
            return True
        if getattr(est, "profile_data", None) is None:
            return False
        self._registry = _registry(self._registry)
        return not _strategies(est, self._registry)[1]

    def fits(self, est: Any, gpus: GpuSet, share: float) -> bool:
        """Whether ``est`` fits on ``gpus`` as :meth:`place` places it."""
        return self.place(est, gpus.count).fits(gpus, share)
