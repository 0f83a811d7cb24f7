"""Answers built on the estimate: what fits on a GPU, side-by-side comparisons, sweeps.

Nothing here re-derives memory: every figure is an :func:`~vramwise.estimate` (or its
``min_per_gpu``). Whether a setting "fits" on ``n`` GPUs of ``M`` usable bytes each is the one
rule of :mod:`vramwise.answers.placement`, the rule ``select_gpus`` applies too: what each GPU holds
(:meth:`~vramwise.answers.placement.Placer.place`: under the run's strategy its rank's figure; without
one on several GPUs the best strategy's figure, the least per GPU of those the profile models, the
same figure ``estimate`` prints; where the profile's placement is its own split rule, that rule's
figure) is at most ``M`` and, placed by the split rule, the first GPU in full plus the profile's
share of each further one covers the total. One placer per answer remembers each (settings, GPU
count) it placed.

The answers keep a headroom free on each GPU: the one given, or else the p90 shortfall of the estimate's device
band (:class:`~vramwise.profiles.bands.DeviceBand`: how far estimates of this profile and method fell short of
published GPU runs, nine runs in ten), or none where no published run covers the profile and method. The
verdict (:class:`Verdict`) is ``fits`` at that headroom, ``tight`` where the total fits the GPU but not with
the headroom, ``does not fit`` where it does not fit the GPU at all; the largest batch, sequence and rank, the
fewest GPUs, the frontier and the advice are all answered at the headroom, so none of them is ``tight``.

The searches assume that more batch, sequence, rank or GPUs never need less memory
(monotone), and check the answer: the largest value found fits and the next one does not
(the next GPU count does fit), so an answer is exact even where that assumption fails
between other points.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from vramwise.answers.advice import Advice, consider
from vramwise.answers.placement import GpuSet, Placement, Placer, rule_text
from vramwise.answers.search import fewest as _fewest, largest as _largest
from vramwise.errors import SettingsError, VramwiseError
from vramwise.inputs.runs_on import RunsOn, check as runs_on_check
from vramwise.estimation.estimate import COMPONENTS, Estimate, estimate, load_model
from vramwise.models.model import ModelSpec
from vramwise.profiles.profile import Profile
from vramwise.estimation.recipe import unpack
from vramwise.estimation.registry import Registry
from vramwise.profiles.settings import (ADAPTER_METHODS, COMPARED_METHODS, DEFAULT_PROFILE, DEFAULTS, LIMITS, METHODS,
                                        SWEEPABLE)

__all__ = ["fit", "Fit", "Verdict", "VERDICTS", "Advice", "MethodFit", "GpuTarget", "compare", "Comparison", "sweep", "Sweep", "DEFAULT_FRONTIER"]

#: Sequence lengths of the default frontier: 16 powers of two from 128 to 4,194,304 tokens.
DEFAULT_FRONTIER = tuple(128 * 2**k for k in range(16))
#: The most GPUs ``fit`` considers.
MAX_GPUS = 1024
#: The verdicts, from the best: fits with the headroom, fits the GPU but not with the headroom, does not fit; and
#: does not run: the settings use a stack, kernel or quantization that hardware/runs_on.yaml says does not run on
#: the GPU's platform (whatever the memory).
VERDICTS = ("fits", "tight", "does not fit", "does not run")


def _gib(n: int | float) -> str:
    return f"{n / 2**30:.2f} GiB"


@dataclass(frozen=True)
class Verdict:
    """Whether the settings fit, with the margin: ``label`` is ``fits`` (the per-GPU need fits with the
    headroom kept free), ``tight`` (it fits the GPU, not with the headroom) or ``does not fit``.

    ``margin_bytes`` is what each GPU has left after the per-GPU need (the GPU's memory less what the run
    places on each of the GPUs asked about, :attr:`Fit.placement`; negative: short by that much; 0 where
    every strategy refuses the run there, ``refused`` saying why); ``placed`` names the best strategy where
    it places a run without one on several GPUs; ``headroom`` the share of each GPU kept free and
    ``headroom_source`` where it comes from: ``given``, ``device band`` (the device band's p90 shortfall)
    or ``none`` (none given and no published run covers the profile and method)."""

    label: str
    margin_bytes: int
    memory_bytes: int  # per GPU
    headroom: float
    headroom_source: str
    headroom_why: str  # the headroom in words: its figure and where it comes from
    placed: str = ""  # where no strategy is set on several GPUs, what places the run: "on 8 GPUs with device_map"
    refused: str | None = None  # every strategy refuses the run on the GPUs: why
    runs_on: str | None = None  # "does not run": what of the settings does not run on the GPU's platform, its source

    @property
    def margin_gib(self) -> float:
        return self.margin_bytes / 2**30

    @property
    def headroom_bytes(self) -> int:
        return int(self.memory_bytes * self.headroom)

    def head(self, placed: bool = True) -> str:
        """The verdict and its margin: ``tight, 2.10 GiB left of 24.00 GiB per GPU, less than the 3.75 GiB
        headroom``; with ``placed``, what places a run without a strategy on several GPUs: ``fits on 8 GPUs
        with device_map, ...`` (a line that names it already leaves it out). Where the settings do not run on
        the GPU's platform, that in one line, and no margin."""
        if self.runs_on is not None:
            return f"does not run: {self.runs_on}"
        if self.refused is not None:
            return f"does not fit, no multi-GPU strategy runs it {self.placed or 'there'}: {self.refused}"
        if self.label == "does not fit":
            if self.margin_bytes >= 0:  # several GPUs without a strategy: each holds its share, together not the total
                return "does not fit, the GPUs together do not cover the total"
            return f"does not fit{self._on(placed)}, {_gib(-self.margin_bytes)} short of {_gib(self.memory_bytes)} per GPU"
        head = f"{self.label}{self._on(placed)}, {_gib(self.margin_bytes)} left of {_gib(self.memory_bytes)} per GPU"
        if self.headroom_bytes:
            head += f", {'at least' if self.label == 'fits' else 'less than'} the {_gib(self.headroom_bytes)} headroom"
        return head

    def _on(self, placed: bool) -> str:
        return f" {self.placed}" if self.placed and placed else ""

    def line(self) -> str:
        """The verdict, its margin and the headroom in words: ``tight, 2.10 GiB left of ... (headroom ...)``; where
        the settings do not run on the GPU's platform, that line alone."""
        if self.runs_on is not None:
            return self.head()
        return f"{self.head()} ({self.headroom_why})"

    def to_dict(self) -> dict:
        return {"label": self.label, "margin_gib": round(self.margin_gib, 2), "margin_bytes": self.margin_bytes,
                "headroom": self.headroom, "headroom_bytes": self.headroom_bytes,
                "headroom_source": self.headroom_source, "placed": self.placed or None, "refused": self.refused,
                "runs_on": self.runs_on, "summary": self.line()}


def default_headroom(est: Estimate) -> tuple[float, str, str]:
    """The headroom when none is given: the p90 shortfall of the estimate's device band, or 0 where no published
    run covers its profile and method; with its source and its words."""
    band = est.error_band.device
    if not band.covered:
        return 0.0, "none", (f"headroom 0 %: no published GPU run covers {band.profile}, {band.method}; "
                             "give a headroom to keep a margin")
    return band.p90_shortfall, "device band", (
        f"headroom {100 * band.p90_shortfall:.1f} %: the device band's p90 shortfall over {band.runs} published GPU "
        f"run{'s' if band.runs != 1 else ''} of {band.profile}, {band.method}")


def given_headroom(est: Estimate, headroom: float) -> str:
    """The words of a headroom given: its figure, and the device band's p90 shortfall where it is more."""
    band = est.error_band.device
    words = f"headroom {100 * headroom:g} % given"
    if band.covered and headroom < band.p90_shortfall:
        words += (f", below the device band's p90 shortfall of {100 * band.p90_shortfall:.1f} % over {band.runs} "
                  f"published GPU run{'s' if band.runs != 1 else ''}")
    return words


@dataclass(frozen=True)
class GpuTarget:
    """The GPU an answer is for: its name, memory per GPU and where the figure comes from; for a catalog
    GPU or a size, ``matched`` is the catalog's :class:`~vramwise.inputs.gpu_catalog.GpuSpec` of the name
    asked for (how it was matched, the reading its figure is, the other candidates of an ambiguous name)."""

    name: str
    memory_bytes: int
    source: str
    count: int = 1  # GPUs of this kind available (the local machine's visible GPUs, or --gpus)
    cuda_total_bytes: int | None = None  # what CUDA reports of a catalog GPU, where known (a server sizes its cache from it)
    matched: Any = None  # the GpuSpec the name resolved to (None: bytes given, or the local GPUs)

    def to_dict(self) -> dict:
        return {"name": self.name, "memory_bytes": self.memory_bytes, "source": self.source, "count": self.count}


def gpu_target(gpu: Any, count: int | None = None) -> GpuTarget:
    """A GPU from a catalog name or alias (``"RTX 4090"``, ``"H100"``), a size (``"24GiB"``, ``"80GB"``),
    a number of bytes, ``"local"`` (the visible GPUs, by free memory) or a :class:`GpuTarget`. A unified-memory
    entry of the catalog (Apple Silicon, an APU) is what its GPU may use of the system's memory, by the
    entry's budget rule (:func:`~vramwise.inputs.gpu_catalog.unified_budget`), and its source begins with
    that budget in one line; a size is dedicated memory."""
    if isinstance(gpu, GpuTarget):
        return gpu if count is None else GpuTarget(gpu.name, gpu.memory_bytes, gpu.source, count, matched=gpu.matched)
    if isinstance(gpu, bool) or gpu is None:
        raise SettingsError(f"gpu must be a GPU name, a size such as 24GiB, a number of bytes or 'local', got {gpu!r}")
    if isinstance(gpu, (int, float)):
        if not (1 <= gpu < 2**60):
            raise SettingsError(f"gpu memory must be a positive number of bytes, got {gpu!r}")
        return GpuTarget(f"{int(gpu):,} bytes", int(gpu), "given in bytes", count or 1)
    if not isinstance(gpu, str):
        raise SettingsError(f"gpu must be a GPU name, a size or 'local', got {type(gpu).__name__}")
    if gpu.strip().lower() == "local":
        from vramwise.gpus.discovery import discover_gpus

        return _local_target(discover_gpus(), count)
    from vramwise.inputs.gpu_catalog import gpu_spec, unified_budget

    spec = gpu_spec(gpu)
    budget = unified_budget(spec)  # memory shared with the CPU: the answers are for what the GPU may use of it
    if budget is not None:
        return GpuTarget(spec.name, budget.gpu_bytes, f"{budget.line()}; the system's memory: {spec.source}",
                         count or 1, None, spec)
    return GpuTarget(spec.name, spec.memory_bytes, spec.source, count or 1, spec.cuda_total_bytes, spec)


def _local_target(disc: Any, count: int | None) -> GpuTarget:
    """The visible devices of the first backend that has any (NVIDIA's first, then AMD, Intel, Apple, Vulkan, as
    discovery tries them; devices of two backends never make one answer): the smallest memory a device offers (its
    free memory where the backend tells, else its total; a unified-memory device: what its GPU may use)."""
    reports = disc.backends or ()
    for report in reports:
        visible = [d for d in report.devices if d.index in report.visible]
        if not visible:
            continue
        offers = lambda d: d.free if d.free is not None else d.total  # noqa: E731
        smallest = min(visible, key=offers)
        what = "free memory" if smallest.free is not None else "memory (the backend does not tell what is in use)"
        source = f"{report.backend}: the smallest {what} among the {len(visible)} visible device(s)"
        if smallest.unified_line():
            source = f"{smallest.unified_line()}; {source}"
        return GpuTarget(f"local ({len(visible)} x {smallest.name})", offers(smallest), source, count or len(visible))
    if not reports and disc.visible:
        visible = [disc.gpu(i) for i in disc.visible]
        smallest = min(visible, key=lambda g: g.free)
        return GpuTarget(f"local ({len(visible)} x {smallest.name})", smallest.free,
                         "nvidia: the smallest free memory among the visible GPUs", count or len(visible))
    tried = "; ".join(disc.report()) or disc.reason or "no GPU is visible"
    raise SettingsError(f"--gpu local: no visible GPU ({tried})")


@dataclass(frozen=True)
class MethodFit:
    """One method at the given settings: its total, its per-GPU need and whether it fits."""

    method: str
    total: int | None
    per_gpu: int | None  # what each GPU of the answer holds (Placer.place)
    fits: bool
    problem: str | None = None  # why it could not be estimated, or why no strategy runs it on the GPUs
    strategy: str | None = None  # the best strategy, where it places a run without one on several GPUs

    def to_dict(self) -> dict:
        return {"method": self.method, "total": self.total, "per_gpu": self.per_gpu, "fits": self.fits,
                "problem": self.problem, "strategy": self.strategy}


@dataclass(frozen=True)
class Fit:
    """What fits on ``gpus`` GPUs of a kind, for one model, profile and settings."""

    gpu: GpuTarget
    gpus: int
    headroom: float  # the share of each GPU kept free: given, or the device band's (verdict.headroom_source)
    usable_bytes: int  # per GPU: memory x (1 - headroom)
    further_gpu_share: float
    profile: str
    settings: Mapping[str, Any]
    estimate: Estimate | None  # at the given settings (None when it could not be made)
    fits: bool
    methods: tuple  # of MethodFit
    max_batch_size: int | None
    max_seq_len: int | None  # capped at the model's context window (context_window), where one is known
    max_lora_rank: int | None  # None for full fine-tuning and inference, or when rank 1 does not fit
    min_gpus: int | None  # fewest GPUs of this kind (None: more than MAX_GPUS)
    frontier: tuple  # ((seq_len, largest batch or None), ...)
    rule: str = field(default="")
    advice: tuple = ()  # of Advice (vramwise.answers.advice): what to change so it fits; empty when it fits
    blocked: tuple = ()  # ((change, why), ...): changes left out of the advice, the stack cannot run them (why: the warning)
    max_seq_len_memory: int | None = None  # the largest sequence memory alone allows (above max_seq_len when capped)
    context_window: int | None = None  # the config's max_position_embeddings (None: the config gives none)
    notes: tuple = ()  # of str: what the answers above leave out (the cap at the context window)
    verdict: Verdict | None = None  # fits / tight / does not fit, with the margin (None: no estimate)
    placement: Placement | None = None  # what each of the gpus holds at the settings (None: no estimate)
    min_gpus_placement: Placement | None = None  # the same on min_gpus GPUs (None: no such count)
    runs_on: RunsOn | None = None  # what of the settings does not run (or is not known to run) on the GPU's platform

    def to_dict(self) -> dict:
        runs_on = self.runs_on
        return {
            "gpu": self.gpu.to_dict(), "gpus": self.gpus, "headroom": self.headroom, "usable_bytes": self.usable_bytes,
            "verdict": self.verdict.to_dict() if self.verdict else None,
            "further_gpu_share": self.further_gpu_share, "profile": self.profile, "settings": dict(self.settings),
            "total": self.estimate.total if self.estimate else None,
            "per_gpu": self.placement.per_gpu if self.placement else None,
            "per_gpu_strategy": self.placement.strategy if self.placement and self.placement.best else None,
            "fits": self.fits, "methods": [m.to_dict() for m in self.methods],
            "max_batch_size": self.max_batch_size, "max_seq_len": self.max_seq_len,
            "max_seq_len_memory": self.max_seq_len_memory, "context_window": self.context_window,
            "max_lora_rank": self.max_lora_rank, "min_gpus": self.min_gpus,
            "min_gpus_per_gpu": self.min_gpus_placement.per_gpu if self.min_gpus_placement else None,
            "min_gpus_strategy": (self.min_gpus_placement.strategy if self.min_gpus_placement
                                  and self.min_gpus_placement.best else None),
            "frontier": [{"seq_len": s, "max_batch_size": b} for s, b in self.frontier], "rule": self.rule,
            "advice": [a.to_dict() for a in self.advice],
            "blocked": [{"description": d, "why": why} for d, why in self.blocked],
            "error_band": self.estimate.error_band.to_dict() if self.estimate else None,
            "notes": list(self.notes),
            "runs_on": None if runs_on is None or runs_on.platform is None else {
                "platform": runs_on.platform.id, "refusals": [r.to_dict() for r in runs_on.refusals],
                "unknowns": [u.line() for u in runs_on.unknowns]},
        }


def runs_on(target: GpuTarget, prof: Profile, settings: Mapping[str, Any]) -> RunsOn:
    """What of profile ``prof`` at ``settings`` does not run on ``target``'s platform (its catalog vendor's, in
    hardware/runs_on.yaml; a GPU given by size or the local GPUs have none, and nothing is refused there); only
    the settings its formulas read count (see :func:`vramwise.inputs.runs_on.check`)."""
    vendor = getattr(target.matched, "vendor", None)
    return runs_on_check(vendor, prof.name, settings, reads=prof.settings_read)


def context_window(spec: ModelSpec) -> tuple[int | None, str]:
    """The model's context window, the config's ``max_position_embeddings`` (None where the config gives
    none), and the words that name it: the fact, and the config's RoPE scaling type and factor where it has
    one.

    The window is the number the config states, never multiplied by the RoPE factor: under transformers
    (modeling_rope_utils.py, 5.x) ``max_position_embeddings`` is already the extended window for llama3
    (``_compute_llama3_parameters``: ``original_max_position_embeddings`` is the pretraining context, 8,192
    for Llama 3.1, beside a max_position_embeddings of 131,072), for yarn and longrope
    (``_compute_yarn_parameters`` / ``_compute_longrope_parameters``: where the config gives
    ``original_max_position_embeddings``, max_position_embeddings / original is the factor, so
    max_position_embeddings is the extended one), while dynamic NTK (``_compute_dynamic_ntk_parameters``)
    rescales the frequencies at run time past max_position_embeddings and linear interpolation
    (``_compute_linear_scaling_rope_parameters``) divides the positions by the factor: neither config states
    a longer window than max_position_embeddings, so none is assumed."""
    facts = spec.facts
    window = facts.get("max_position_embeddings")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        return None, ""
    words = "max_position_embeddings"
    kind, factor = facts.get("rope_scaling_type"), facts.get("rope_scaling_factor")
    if kind not in (None, "default") and factor is not None:
        words += f"; rope scaling {kind}, factor {factor:g}"
    return window, words


def _capped_grid(grid: tuple, window: int) -> tuple:
    """The frontier's sequence lengths with those past ``window`` replaced by it (once, in order)."""
    out: list = []
    for s in grid:
        s = min(s, window)
        if s not in out:
            out.append(s)
    return tuple(out)


def _fits(est: Estimate, n: int, usable: int, share: float, placer: Placer | None = None) -> bool:
    """The placement rule on ``n`` GPUs of ``usable`` bytes each (``placer``: the answer's; default a new one)."""
    return (placer or Placer()).fits(est, GpuSet.alike(usable, n), share)


def _strategy_world_size(world_size: Any, n: int, gpus_are: str, answer: str) -> int:
    """A strategy runs on the ``n`` GPUs an answer is about: its world size, or a refusal of another one."""
    if world_size not in (1, n):
        raise SettingsError(f"world_size {world_size!r} differs from the {n} GPU(s) {gpus_are}: leave world_size "
                            f"out, {answer} is for the GPUs")
    return n


def fit(
    model: Any,
    *,
    gpu: Any,
    gpus: int | None = None,
    headroom: float | None = None,
    seq_lens: Iterable[int] | None = None,
    profile: str | None = None,
    registry: Registry | None = None,
    trust_remote_code: bool = False,
    **settings: Any,
) -> Fit:
    """What fits on ``gpus`` GPUs like ``gpu`` (see :func:`gpu_target`), with ``headroom`` (a share of
    each GPU's memory kept free, 0 to 0.9; None: the p90 shortfall of the estimate's device band, 0 where no
    published run covers it): the verdict (fits, tight, does not fit) with its margin, whether the settings fit, which methods fit, the largest
    batch size at the given sequence length, the largest sequence length at the given batch size, the
    largest LoRA rank, the fewest GPUs, and for each sequence length of ``seq_lens`` the largest batch.
    When the settings do not fit, ``advice`` lists what to change so they do
    (:mod:`vramwise.answers.advice`), and ``blocked`` the changes left out because the stack cannot run
    them (their estimate carries a warning marked ``blocks: true``), each with that warning.

    ``model`` may be a recipe (:func:`vramwise.read_recipe`): its model, profile and settings, under
    those given here; its gradient accumulation steps and its strategy's world size (when ``gpus`` is
    not given) apply, and each piece of advice is also written in the recipe's own keys."""
    reg = registry or Registry.default()
    recipe = model if hasattr(model, "write") and hasattr(model, "settings") and hasattr(model, "extras") else None
    if recipe is not None:
        if recipe.model is None:
            raise SettingsError(f"{getattr(recipe, 'path', None) or 'the recipe'} names no model: give one")
        given = settings
        model, profile, settings = recipe.model, profile or recipe.profile, {**recipe.settings, **settings}
        if settings.get("strategy") not in (None, "none") and "world_size" not in given:
            if gpus is None and isinstance(settings.get("world_size"), int):
                gpus = settings["world_size"]  # the recipe's processes
            elif gpus is not None:
                settings["world_size"] = gpus  # the GPUs asked about
    profile = profile or DEFAULT_PROFILE
    if headroom is not None and (isinstance(headroom, bool) or not isinstance(headroom, (int, float))
                                 or not 0 <= headroom <= 0.9):
        raise SettingsError(f"headroom must be a share from 0 to 0.9 of each GPU's memory, got {headroom!r}")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS):
        raise SettingsError(f"gpus must be a whole number from 1 to {MAX_GPUS}, got {gpus!r}")
    target = gpu_target(gpu, gpus)
    n = target.count
    spec = model if isinstance(model, ModelSpec) else load_model(model, registry=reg, trust_remote_code=trust_remote_code)
    base = {**DEFAULTS, **settings}
    if base["strategy"] not in (None, "none"):  # the strategy runs on the GPUs asked about
        base["world_size"] = _strategy_world_size(base["world_size"], n, "asked about", "the fit")
    prof = reg.profile(profile)
    if prof.serving is not None:  # a serving engine fills its GPUs: the answers are context and concurrency
        from vramwise.answers.serving import serving_fit

        refused = runs_on(target, prof, base)
        if not refused.runs:
            raise SettingsError(refused.line())

        ranks = base["tensor_parallel_size"] * base["pipeline_parallel_size"]
        if gpus is not None and gpus != ranks:
            raise SettingsError(f"profile {prof.name} runs on tensor_parallel_size x pipeline_parallel_size GPUs "
                                f"({ranks}), not on {gpus}: set --tensor-parallel-size (and --pipeline-parallel-size) "
                                "instead of --gpus")
        if headroom:
            raise SettingsError(f"profile {prof.name} keeps 1 - gpu_memory_utilization of each GPU free: set "
                                "--gpu-memory-utilization instead of --headroom")
        total = target.cuda_total_bytes or target.memory_bytes
        return serving_fit(spec, prof, GpuTarget(target.name, total, target.source, ranks, target.cuda_total_bytes,
                                                           target.matched), base, reg)
    from vramwise.answers.offload import is_local, local_answers

    if is_local(prof):  # GPUs of one kind and the host: the context, the layers offloaded and the sequences
        count = settings.get("gpu_count")
        if n != 1 and count not in (None, 1, n):
            raise SettingsError(f"gpus {n} and gpu_count {count} disagree: both are the GPUs llama.cpp splits the "
                                "model over; give one of them")
        if n != 1:
            settings = {**settings, "gpu_count": n}
        if seq_lens is not None:
            raise SettingsError(f"profile {prof.name} answers the context (n_ctx), not a training frontier: leave the "
                                "sequence lengths (--seq-lens) out")
        given = headroom

        def headroom_of(e: Estimate) -> tuple:
            return default_headroom(e) if given is None else (given, "given", given_headroom(e, given))

        return local_answers(spec, prof.name, target, {**settings, "method": "inference"}, reg,
                             headroom_of=headroom_of, verdict_type=Verdict)
    share = prof.further_gpu_share
    placer = Placer(reg)  # this answer's: each (settings, GPU count) placed once
    _fits_on = placer.fits

    def est(**changes) -> Estimate:
        return estimate(spec, profile=profile, registry=reg, **{**base, **changes})

    here = est()  # raises on bad settings: the answers below are all about these settings
    ran = runs_on(target, prof, here.settings.to_dict())
    if headroom is None:
        headroom, source, why = default_headroom(here)
    else:
        source, why = "given", given_headroom(here, headroom)
    usable = int(target.memory_bytes * (1 - headroom))
    gpu_set = GpuSet.alike(usable, n)  # the GPUs asked about, as the placement rule sees them
    methods = []
    for m in prof.methods:
        try:
            e = est(method=m, load_in_4bit=None)
            placed = placer.place(e, n)
            method_runs = runs_on(target, prof, e.settings.to_dict())
            methods.append(MethodFit(m, e.total, placed.per_gpu, placed.fits(gpu_set, share) and method_runs.runs,
                                     method_runs.line() or placed.refused, placed.strategy if placed.best else None))
        except VramwiseError as exc:
            methods.append(MethodFit(m, None, None, False, str(exc)))
    max_batch = _largest(lambda b: _fits_on(est(batch_size=b), gpu_set, share), LIMITS["batch_size"])
    max_seq_memory = _largest(lambda s: _fits_on(est(seq_len=s), gpu_set, share), LIMITS["seq_len"])
    window, window_words = context_window(spec)
    max_seq, notes = max_seq_memory, ()
    max_rank = None
    if here.settings.method in ADAPTER_METHODS:
        max_rank = _largest(lambda r: _fits_on(est(lora_rank=r), gpu_set, share), LIMITS["lora_rank"])
    if here.strategy is not None or placer.by_strategy(here):
        # per-rank bytes never grow with more ranks (tests/unit/profiles/test_strategies.py), nor does the least of
        # the strategies' figures; one GPU (no strategy) is tried first
        min_gpus = _fewest(lambda k: _fits(here, k, usable, share, placer), MAX_GPUS)
    else:
        min_gpus = next((k for k in range(1, MAX_GPUS + 1) if _fits(here, k, usable, share, placer)), None)
    grid = tuple(DEFAULT_FRONTIER if seq_lens is None else seq_lens)
    for s in grid:
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= LIMITS["seq_len"]:
            raise SettingsError(f"frontier sequence lengths must be whole numbers from 1 to {LIMITS['seq_len']:,}, got {s!r}")
    if window is not None and max_seq_memory is not None and max_seq_memory > window:
        # memory allows more tokens than the model has positions: the sequence answers, the frontier's
        # lengths and the advice that shortens a sequence stop at its window
        max_seq = window
        capped = _capped_grid(grid, window)
        notes = (f"largest sequence length capped at the model's context window of {window:,} tokens "
                 f"({window_words}); memory alone allows {max_seq_memory:,}"
                 + (", and the frontier stops there" if capped != grid else ""),)
        grid = capped
    frontier = tuple(
        (s, _largest(lambda b, s=s: _fits_on(est(seq_len=s, batch_size=b), gpu_set, share), LIMITS["batch_size"]))
        for s in grid
    )
    placed = placer.place(here, n)
    rule = rule_text(here.strategy, n, usable, share, best=placed.strategy if placed.best else None)
    fits_here = placed.fits(gpu_set, share) and ran.runs
    whole = GpuSet.alike(target.memory_bytes, n)  # the GPUs with nothing kept free
    label = ("does not run" if not ran.runs else "fits" if fits_here else "tight" if placed.fits(whole, share)
             else "does not fit")
    on = (f"on {n} GPUs" + placed.words) if placed.best or placed.refused else ""
    verdict = Verdict(label, placed.spare(target.memory_bytes) or 0, target.memory_bytes, float(headroom), source, why,
                      on, placed.refused, ran.line() or None)
    notes += tuple(u.line() for u in ran.unknowns)
    advice = blocked = ()
    if not fits_here and ran.runs:  # settings that do not run there: the refusal names what runs instead
        steps = recipe.extras.get("gradient_accumulation_steps") if recipe is not None else None
        accumulation = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else 1
        layout = here.settings.experts_layout  # resolved once, not again for every new combination of settings
        got = consider(here, lambda changes: est(experts_layout=layout, **changes), gpus=n, usable=usable, share=share,
                       profile=prof, registry=reg, max_batch_size=max_batch, max_seq_len=max_seq, max_lora_rank=max_rank,
                       min_gpus=min_gpus, max_gpus=MAX_GPUS, accumulation=accumulation, recipe=recipe, placer=placer)
        advice, blocked = got.advice, got.blocked
    return Fit(
        gpu=target, gpus=n, headroom=float(headroom), usable_bytes=usable, further_gpu_share=share, profile=prof.name,
        settings=here.settings.to_dict(), estimate=here, fits=fits_here, methods=tuple(methods),
        max_batch_size=max_batch, max_seq_len=max_seq, max_lora_rank=max_rank, min_gpus=min_gpus,
        frontier=frontier, rule=rule, advice=advice, blocked=blocked, max_seq_len_memory=max_seq_memory,
        context_window=window, notes=notes, verdict=verdict, placement=placed,
        min_gpus_placement=None if min_gpus is None else placer.place(here, min_gpus), runs_on=ran,
    )


@dataclass(frozen=True)
class Comparison:
    """Estimates side by side: one cell per (profile, method). With a GPU, each cell's ``fits`` keeps the p90
    shortfall of its device band free, as fit does by default, and ``verdicts`` says fits, tight or does not
    fit per cell (None without a GPU or an estimate), or does not run where the cell's settings use something
    hardware/runs_on.yaml says does not run on the GPU's platform (``runs_on``: that line, per cell)."""

    cells: tuple  # ((profile, method, Estimate or None, problem or None, fits or None), ...)
    gpu: GpuTarget | None
    verdicts: tuple = ()  # per cell: "fits", "tight", "does not fit", "does not run" or None
    runs_on: tuple = ()  # per cell: why it does not run on the GPU's platform, or None

    def to_dict(self) -> dict:
        out = []
        for profile, method, est, problem, fits in self.cells:
            cell = {"profile": profile, "method": method, "problem": problem, "fits": fits}
            if est is not None:
                cell.update({c: getattr(est, c) for c in COMPONENTS})
                cell["total"] = est.total
            cell["error_band"] = est.error_band.to_dict() if est is not None else None
            if self.gpu is not None:
                cell["verdict"] = self.verdicts[len(out)] if self.verdicts else None
                cell["runs_on"] = self.runs_on[len(out)] if self.runs_on else None
            out.append(cell)
        return {"gpu": self.gpu.to_dict() if self.gpu else None, "cells": out}


def compare(model: Any, *, methods: Iterable[str] = COMPARED_METHODS, profiles: Iterable[str] | None = None,
            gpu: Any = None, gpus: int | None = None, registry: Registry | None = None, trust_remote_code: bool = False,
            **settings: Any) -> Comparison:
    """One estimate per (profile, method) at the same settings; with ``gpu``, whether each fits. ``model`` may
    be a :class:`~vramwise.Recipe` (its settings under the ones given; ``profiles`` None: its profile, else
    the default one)."""
    reg = registry or Registry.default()
    model, profile, settings = unpack(model, None, settings)
    settings.pop("method", None)  # compare sets the method of each column
    if profiles is None:
        profiles = (profile or DEFAULT_PROFILE,)
    spec = load_model(model, registry=reg, trust_remote_code=trust_remote_code)
    target = gpu_target(gpu, gpus) if gpu is not None else None
    methods, profiles = tuple(methods), tuple(profiles)
    for m in methods:
        if m not in METHODS:
            raise SettingsError(f"unknown method {m!r} (choose from: {', '.join(METHODS)})")
    cells, verdicts, refusals = [], [], []
    placer = Placer(reg)  # this comparison's
    strategy = settings.get("strategy")
    served = reg.strategy_info(strategy)["profiles"] if strategy not in (None, "none") else None
    if served is not None and target is not None:  # as in fit: the strategy runs on the GPUs compared on
        settings["world_size"] = _strategy_world_size(settings.get("world_size", 1), target.count, "compared on",
                                                      "the comparison")
    for p in profiles:
        prof = reg.profile(p)
        if served is not None and p not in served:  # the strategy is not modelled on this profile: say so per cell
            why = f"strategy {strategy} is modelled on the {', '.join(served)} profile, not on {p}"
            cells.extend((p, m, None, why, None) for m in methods)
            verdicts.extend(None for _ in methods)
            refusals.extend(None for _ in methods)
            continue
        extra = {}
        if prof.serving is not None:  # a training step's batch and sequence are not a server's (max_num_seqs...)
            extra.update(batch_size=DEFAULTS["batch_size"], seq_len=DEFAULTS["seq_len"])
        if prof.serving is not None and target is not None and settings.get("gpu") is None \
                and settings.get("gpu_memory") is None:  # a server sizes its cache from the GPU compared on
            extra["gpu_memory"] = target.cuda_total_bytes or target.memory_bytes
        for m in methods:
            try:
                e = estimate(spec, profile=p, registry=reg, **{**settings, **extra, "method": m, "load_in_4bit": None})
            except SettingsError as exc:
                if m in prof.methods:
                    raise
                cells.append((p, m, None, str(exc), None))
                verdicts.append(None)
                refusals.append(None)
                continue
            fits = verdict = refused = None
            if target is not None:  # fit's rule at its default headroom, the device band's p90 shortfall
                headroom = default_headroom(e)[0]
                fits = _fits(e, target.count, int(target.memory_bytes * (1 - headroom)), prof.further_gpu_share, placer)
                verdict = ("fits" if fits else "tight" if _fits(e, target.count, target.memory_bytes,
                                                                prof.further_gpu_share, placer) else "does not fit")
                ran = runs_on(target, prof, e.settings.to_dict())
                if not ran.runs:  # as in fit: no verdict of fits for settings that do not run there
                    fits, verdict, refused = False, "does not run", ran.line()
            cells.append((p, m, e, None, fits))
            verdicts.append(verdict)
            refusals.append(refused)
    return Comparison(tuple(cells), target, tuple(verdicts), tuple(refusals))




@dataclass(frozen=True)
class Sweep:
    """Totals over a grid of settings: ``axes`` names what varies, ``rows`` one entry per point."""

    axes: tuple  # ((setting, (values...)), ...)
    rows: tuple  # ((values of the axes, Estimate), ...)

    def to_dict(self) -> dict:
        names = [a for a, _ in self.axes]
        return {
            "axes": {a: list(v) for a, v in self.axes},
            "rows": [{**dict(zip(names, vals)), **{c: getattr(e, c) for c in COMPONENTS}, "total": e.total,
                      "error_band": e.error_band.to_dict()} for vals, e in self.rows],
        }


def sweep(model: Any, *, profile: str | None = None, registry: Registry | None = None, trust_remote_code: bool = False,
          **settings: Any) -> Sweep:
    """Estimates over every combination of the settings given as lists (among :data:`SWEEPABLE`). ``model`` may
    be a :class:`~vramwise.Recipe` (its settings under the ones given; ``profile`` None: its profile, else the
    default one)."""
    reg = registry or Registry.default()
    model, profile, settings = unpack(model, profile, settings)
    profile = profile or DEFAULT_PROFILE
    spec = load_model(model, registry=reg, trust_remote_code=trust_remote_code)
    axes = []
    fixed = {}
    for name, value in settings.items():
        if name in SWEEPABLE and isinstance(value, (list, tuple)):
            if not value:
                raise SettingsError(f"{name}: give at least one value to sweep")
            axes.append((name, tuple(value)))
        else:
            fixed[name] = value
    size = 1
    for _, values in axes:
        size *= len(values)
    if size > 100_000:
        raise SettingsError(f"a sweep of {size:,} points is too large (at most 100,000)")
    names = [a for a, _ in axes]
    rows = tuple(
        (vals, estimate(spec, profile=profile, registry=reg, **{**fixed, **dict(zip(names, vals))}))
        for vals in itertools.product(*(v for _, v in axes))
    )
    return Sweep(tuple(axes), rows)
