"""GPU selection for an estimate: which of this machine's GPUs a run should use, and why.

Selection follows docs/unsloth-profile.md#multi-gpu and the placement rule of
:mod:`vramwise.answers.placement`: explicit ids are validated against the parent-visible set and
all used; otherwise GPUs are ranked by free memory and added one at a time, the first counting its
full free memory and each further one a share of it (the profile's ``selection.further_gpu_share``,
0.85 in the bundled profiles), until the set fits by that rule. On several GPUs a run without a
strategy is judged by what the best strategy its profile models places on each
(:meth:`~vramwise.answers.placement.Placer.place`, the figure ``estimate`` prints), named in the
reason and in ``strategy``; by the profile's split rule only where that is the profile's own
placement. The GPUs themselves come from :func:`vramwise.gpus.discovery.discover_gpus`.

Every backend's visible devices are candidates (NVIDIA through NVML, AMD, Intel, Vulkan; each device's
memory is its free memory where its backend tells, else its total), but the GPUs of one selection come
from one backend: runtimes do not pool devices across vendors or APIs. Each backend's devices are chosen
by the rule above; among the backends, of those whose set holds the estimate, the one on the fewest GPUs
wins, then the first in discovery order (NVIDIA, AMD, Intel, Vulkan: a vendor's runtime before Vulkan);
where none holds it, or without an estimate, the one with the most usable memory. The selection names its backend and the variable that gives a child process its devices
(``CUDA_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES``, ``ZE_AFFINITY_MASK``, ``GGML_VK_VISIBLE_DEVICES``).
Explicit ids are physical indices within one backend: ``backend=`` names it, else NVIDIA's where NVML found
GPUs, else the only backend with devices. With no device but an Apple GPU (unified memory), the estimate is
judged against what its GPU may use (``non_cuda``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from vramwise.answers.placement import GpuSet, Placement, Placer, pooled_bytes
from vramwise.errors import GpuSelectionError, VramwiseError
from vramwise.estimation.estimate import estimate
from vramwise.profiles.settings import DEFAULT_PROFILE
from vramwise.gpus.device import NVIDIA, BackendReport
from vramwise.gpus.discovery import GpuDiscovery, NvmlBackend, discover_gpus

__all__ = ["GpuSelection", "select_gpus", "device_map", "child_env"]


@dataclass(frozen=True)
class GpuSelection:
    """Which GPUs to use, and why."""

    gpu_ids: tuple  # physical indices; empty under inherit_parent_visible with MIG entries, or non_cuda
    mode: str  # explicit, auto, fallback_all, inherit_parent_visible, non_cuda
    required_bytes: int | None  # the estimate's total, when one was made
    usable_bytes: int | None  # first GPU's free + the profile's share of each further GPU's free
    min_per_gpu_bytes: int | None  # what the run places on each of this many GPUs (Placer.place)
    fits: bool | None  # None when unknown (no estimate, or no GPU)
    reason: str
    gpus: tuple = field(default=())  # GpuInfo of the selected GPUs, in selection order
    inherited_visible_devices: str | None = None
    strategy: str | None = None  # the best strategy, where it places a run without one on the GPUs
    backend: str = NVIDIA  # the backend whose devices these are
    variable: str | None = "CUDA_VISIBLE_DEVICES"  # the variable that gives a child process these devices
    variable_value: str | None = None  # its value, for a backend other than NVIDIA's

    @property
    def device_map(self) -> str:
        return device_map(self)

    @property
    def cuda_visible_devices(self) -> str | None:
        """Value for a child process's CUDA_VISIBLE_DEVICES (None: leave it as inherited, or not NVIDIA's GPUs)."""
        if self.mode == "inherit_parent_visible":
            return self.inherited_visible_devices
        if self.mode == "non_cuda" or self.backend != NVIDIA:
            return None
        return ",".join(str(i) for i in self.gpu_ids)

    @property
    def visibility(self) -> tuple[str, str] | None:
        """(variable, value) that gives a child process the selected devices; None: nothing to set."""
        value = self.cuda_visible_devices if self.backend == NVIDIA else self.variable_value
        return None if self.variable is None or value is None else (self.variable, value)

    def to_dict(self) -> dict:
        shown = self.visibility
        return {
            "gpu_ids": list(self.gpu_ids), "mode": self.mode, "required_bytes": self.required_bytes,
            "usable_bytes": self.usable_bytes, "min_per_gpu_bytes": self.min_per_gpu_bytes, "fits": self.fits,
            "reason": self.reason, "strategy": self.strategy, "device_map": self.device_map, "cuda_visible_devices": self.cuda_visible_devices,
            "backend": self.backend, "visibility_variable": shown and shown[0], "visibility_value": shown and shown[1],
            "gpus": [vars(g).copy() for g in self.gpus],
        }


def _further_gpu_share(est: Any) -> float:
    """The profile's share of a further GPU's free memory (the estimate's profile's, or a stand-in's own
    ``further_gpu_share``; else the default profile's)."""
    prof = getattr(est, "profile_data", None)
    share = prof.further_gpu_share if prof is not None else getattr(est, "further_gpu_share", None)
    if share is None:
        from vramwise.estimation.registry import Registry

        share = Registry.default().profile(DEFAULT_PROFILE).further_gpu_share
    return share


@dataclass(frozen=True)
class _Pool:
    """The devices of one backend a selection may take from."""

    report: BackendReport
    uses_uuids: bool = False  # NVIDIA's CUDA_VISIBLE_DEVICES names GPUs by UUID or MIG id

    @property
    def backend(self) -> str:
        return self.report.backend

    def gpu(self, index: int) -> Any:
        return next(d for d in self.report.devices if d.index == index)

    def memory(self, index: int) -> int:
        """What the device offers a run: its free memory where the backend tells, else its total."""
        d = self.gpu(index)
        return d.free if d.free is not None else d.total


def _pools(disc: GpuDiscovery) -> tuple[_Pool | None, tuple]:
    """(NVIDIA's pool where NVML found GPUs, every pool with devices this process may use, NVIDIA's first).
    A backend with no variable to choose its devices (Apple's one GPU) is no pool: :func:`_non_cuda` judges it."""
    reports = disc.backends or (BackendReport(NVIDIA, disc.gpus, disc.visible, "CUDA_VISIBLE_DEVICES",
                                              disc.cuda_visible_devices, disc.reason, selector="CUDA_VISIBLE_DEVICES"),)
    nvidia = None
    pools = []
    for r in reports:
        if r.backend == NVIDIA:
            if r.devices:
                nvidia = _Pool(r, disc.uses_uuids)
                if r.visible or disc.uses_uuids:
                    pools.append(nvidia)
        elif r.visible and r.selector is not None:
            pools.append(_Pool(r))
    return nvidia, tuple(pools)


def _explicit(ids: Sequence[Any], pool: _Pool) -> tuple:
    report = pool.report
    if pool.uses_uuids:
        raise GpuSelectionError(
            f"explicit GPU ids {list(ids)} cannot be honoured: CUDA_VISIBLE_DEVICES={report.variable_value!r} "
            "names GPUs by UUID or MIG id, so physical ids are ambiguous; unset it or use automatic selection"
        )
    bad_type = [i for i in ids if isinstance(i, bool) or not isinstance(i, int)]
    if bad_type:
        raise GpuSelectionError(f"GPU ids must be integers, got {bad_type}")
    if not ids:
        raise GpuSelectionError("no GPU ids given: pass at least one, or none at all for automatic selection")
    repeated = sorted({i for i in ids if list(ids).count(i) > 1})
    if repeated:
        raise GpuSelectionError(f"GPU ids repeat: {repeated} (asked for {list(ids)})")
    negative = [i for i in ids if i < 0]
    if negative:
        raise GpuSelectionError(f"GPU ids must not be negative: {negative}")
    known = [d.index for d in report.devices]
    beyond = [i for i in ids if i not in known]
    if beyond:
        count = len(known)
        kind = "" if report.backend == NVIDIA else f"{report.backend} "
        if known == list(range(count)):
            raise GpuSelectionError(f"GPU ids {beyond} exceed the {count} physical {kind}GPU(s) of this machine "
                                    f"(ids 0-{count - 1})")
        raise GpuSelectionError(f"GPU ids {beyond} name no {kind}GPU of this machine (ids {known})")
    hidden = [i for i in ids if i not in report.visible]
    if hidden:
        why = (report.reason if report.backend != NVIDIA and report.reason
               else f"{report.variable}={report.variable_value!r}")
        raise GpuSelectionError(f"GPU ids {hidden} are not visible to this process ({why}; visible: {list(report.visible)})")
    return tuple(ids)


def _non_cuda(disc: GpuDiscovery, est: Any) -> GpuSelection:
    """No device a visibility variable selects: the run uses the CPU. Where a backend reports a unified-memory device
    (Apple Silicon), the answer is judged against what its GPU may use, and its reason says so in one line."""
    reason = "; ".join(disc.report()) if disc.backends else (disc.reason or "no NVIDIA GPU visible")
    unified = [d for b in disc.backends if b.backend != NVIDIA for d in b.devices
               if d.unified and d.index in b.visible]
    if not unified:
        return GpuSelection((), "non_cuda", est.total if est else None, None, None, None, reason, backend="cpu",
                            variable=None)
    dev = unified[0]
    reason = disc.reason or "no NVIDIA GPU visible"
    fits = None if est is None else est.total <= dev.total
    verdict = "" if est is None else (f"; the estimate ({est.total / 2**30:.2f} GiB) "
                                      + ("fits it" if fits else "does not fit it"))
    return GpuSelection((), "non_cuda", est.total if est else None, dev.total, None, fits,
                        f"{reason}; {dev.backend} {dev.index} ({dev.name}): {dev.unified_line()}{verdict}",
                        backend=dev.backend, variable=None)


def select_gpus(
    estimate_or_model: Any = None,
    *,
    gpu_ids: Sequence[int] | None = None,
    backend: str | None = None,
    discovery: GpuDiscovery | None = None,
    nvml: NvmlBackend | None = None,
    env: Mapping[str, str] | None = None,
    **estimate_kwargs: Any,
) -> GpuSelection:
    """Choose GPUs for a run: explicit ``gpu_ids`` (validated, all used) or automatically from free memory,
    among the devices of one backend (``backend`` names it: "nvidia", "amd", "intel", "vulkan"; else the
    backend whose devices hold the run best, see the module's docstring).

    ``estimate_or_model`` is an :class:`~vramwise.Estimate` (or any object with ``total`` and
    ``min_per_gpu(n)``, and optionally ``further_gpu_share``), a model source for
    :func:`~vramwise.estimate` (with ``estimate_kwargs``), or None when no estimate can be made.
    """
    disc = discovery if discovery is not None else discover_gpus(nvml=nvml, env=env)
    est = None
    est_problem = None
    if hasattr(estimate_or_model, "total") and hasattr(estimate_or_model, "min_per_gpu"):
        est = estimate_or_model  # an Estimate (anything with total and min_per_gpu(n))
    elif estimate_or_model is not None:
        try:
            est = estimate(estimate_or_model, **estimate_kwargs)
        except VramwiseError as e:
            est_problem = str(e)
    nvidia, pools = _pools(disc)
    if backend is not None:
        report = next((r for r in disc.backends if r.backend == backend), None)
        if report is None:
            known = ", ".join(r.backend for r in disc.backends) or NVIDIA
            raise GpuSelectionError(f"no backend {backend!r}: the backends are {known}")
        nvidia = nvidia if backend == NVIDIA else None
        pools = tuple(p for p in pools if p.backend == backend)
        if not pools and report.visible and report.selector is None and gpu_ids is None:
            return _non_cuda(disc, est)  # Apple's one GPU: nothing to choose, its working set to judge against
        if not pools and not (nvidia and gpu_ids is not None):
            raise GpuSelectionError(report.reason or f"no {backend} GPU is visible to this process")
    share = _further_gpu_share(est)
    placer = Placer(estimate_kwargs.get("registry"))  # this selection's

    def chosen_in(pool: _Pool, ids: Sequence[int] | None) -> GpuSelection:
        return _select_in(pool, est, est_problem, ids, placer, share)

    if gpu_ids is not None:
        if nvidia is not None:
            return chosen_in(nvidia, gpu_ids)
        if len(pools) == 1:
            return chosen_in(pools[0], gpu_ids)
        if not pools:
            raise GpuSelectionError(f"GPU ids {list(gpu_ids)} were asked for, but {disc.reason or 'no GPU is visible'}")
        raise GpuSelectionError(f"GPU ids {list(gpu_ids)} are ambiguous: GPUs of {', '.join(p.backend for p in pools)} "
                                "are visible; name the backend")
    if not pools:
        if nvidia is not None:  # NVIDIA's GPUs, all hidden, and no other backend's
            raise GpuSelectionError(disc.reason or "no GPU is visible to this process")
        return _non_cuda(disc, est)
    return _pick([chosen_in(p, None) for p in pools], est)


def _pick(candidates: Sequence[GpuSelection], est: Any) -> GpuSelection:
    """One backend's selection: of the sets that hold the estimate, the one on the fewest GPUs, then the backend
    first in discovery order (a vendor's runtime before Vulkan); where none holds it, or there is no estimate,
    the one with the most usable memory."""
    if len(candidates) == 1:
        return candidates[0]
    order = {c.backend: k for k, c in enumerate(candidates)}
    fitting = [c for c in candidates if c.fits]
    if fitting:
        best = min(fitting, key=lambda c: (len(c.gpu_ids), order[c.backend]))
        why = "it holds the estimate on the fewest GPUs, then comes first"
    else:
        best = max(candidates, key=lambda c: (c.usable_bytes or 0, -order[c.backend]))
        why = "the most usable memory" + ("" if est is None else ", as no backend's GPUs hold the estimate")
    others = "; ".join(f"{c.backend}: {len(c.gpu_ids)} GPU(s), {(c.usable_bytes or 0) / 2**30:.2f} GiB usable"
                       + ("" if c.fits is None else (", fits" if c.fits else ", does not fit"))
                       for c in candidates if c is not best)
    return dataclasses.replace(best, reason=f"{best.reason}; {best.backend} of the backends with visible GPUs: "
                                            f"{why} (beside {others}); GPUs of different backends are never combined")


def _select_in(pool: _Pool, est: Any, est_problem: str | None, gpu_ids: Sequence[int] | None, placer: Placer,
               share: float) -> GpuSelection:
    """The selection among one backend's devices (its visible ones, or the explicit ``gpu_ids``)."""
    report = pool.report
    required = est.total if est else None

    def figures(ids: tuple) -> tuple[int, Placement | None, bool | None]:
        gpus = GpuSet.of([pool.memory(i) for i in ids])  # the first id's GPU counted in full
        usable = int(pooled_bytes(gpus, share))
        if est is None:
            return usable, None, None
        placed = placer.place(est, len(ids))
        return usable, placed, placed.fits(gpus, share)

    def best(placed: Placement | None) -> str | None:
        return placed.strategy if placed is not None and placed.best else None

    def made(ids: tuple, mode: str, usable: int | None, per_gpu: int | None, fits: bool | None, why: str,
             strategy: str | None = None) -> GpuSelection:
        value = None if report.backend == NVIDIA else report.selector_value(ids)
        return GpuSelection(ids, mode, required, usable, per_gpu, fits, why, tuple(pool.gpu(i) for i in ids),
                            strategy=strategy, backend=report.backend, variable=report.selector, variable_value=value)

    if gpu_ids is not None:
        ids = _explicit(list(gpu_ids), pool)
        usable, placed, ok = figures(ids)
        why = f"using the requested GPUs {list(ids)}"
        if placed is not None and placed.refused is not None:
            why += f"; no multi-GPU strategy runs the estimate on {len(ids)} GPUs ({placed.refused})"
        elif ok is False:
            why += "; the estimate may not fit on them" + (f" with {best(placed)}" if best(placed) else "")
        elif best(placed):
            why += f", with {best(placed)}"
        return made(ids, "explicit", usable, placed and placed.per_gpu, ok, why, best(placed))
    if pool.uses_uuids:
        return GpuSelection(
            report.visible, "inherit_parent_visible", required, None, None, None,
            f"CUDA_VISIBLE_DEVICES={report.variable_value!r} names GPUs by UUID or MIG id; keeping the parent's devices",
            tuple(pool.gpu(i) for i in report.visible), inherited_visible_devices=report.variable_value,
        )
    if est is None:
        ids = report.visible
        usable, _, _ = figures(ids)
        why = "no estimate could be made" + (f" ({est_problem})" if est_problem else "") + "; using every visible GPU"
        return made(ids, "fallback_all", usable, None, None, why)
    ranked = sorted(report.visible, key=lambda i: (-pool.memory(i), i))
    for n in range(1, len(ranked) + 1):
        ids = tuple(ranked[:n])
        usable, placed, ok = figures(ids)
        if ok:
            if best(placed):  # a strategy places the run: each GPU holds its rank, nothing is pooled
                why = (f"{n} GPU(s) with the most free memory hold the estimate with {best(placed)} "
                       f"({placed.per_gpu / 2**30:.2f} GiB per GPU, {min(pool.memory(i) for i in ids) / 2**30:.2f} "
                       "GiB free on the smallest)")
            else:
                why = (f"{n} GPU(s) with the most free memory cover the estimate ({required / 2**30:.2f} GiB needed, "
                       f"{usable / 2**30:.2f} GiB usable, {placed.per_gpu / 2**30:.2f} GiB per GPU)")
            return made(ids, "auto", usable, placed.per_gpu, True, why, best(placed))
    ids = tuple(ranked)
    usable, placed, _ = figures(ids)
    on_all = (f"{placed.per_gpu / 2**30:.2f} GiB per GPU on all {len(ids)} with {best(placed)}" if best(placed)
              else f"{usable / 2**30:.2f} GiB usable on all {len(ids)}")
    return made(ids, "fallback_all", usable, placed.per_gpu, False,
                f"no set of visible GPUs covers the estimate ({required / 2**30:.2f} GiB needed, {on_all}); using all of "
                "them, the run may not fit", best(placed))


def device_map(selection_or_ids: GpuSelection | Sequence[int]) -> str:
    """transformers device_map for the selection: "sequential" for one GPU, "balanced" for several
    ("cpu" when no GPU is visible, "auto" when MIG devices are inherited without physical ids)."""
    ids = selection_or_ids.gpu_ids if isinstance(selection_or_ids, GpuSelection) else tuple(selection_or_ids)
    if isinstance(selection_or_ids, GpuSelection):
        if selection_or_ids.mode == "non_cuda":
            return "cpu"
        if selection_or_ids.mode == "inherit_parent_visible" and not ids:
            return "auto"
    return "balanced" if len(ids) > 1 else "sequential"


def child_env(selection: GpuSelection, base: Mapping[str, str] | None = None) -> dict:
    """A copy of ``base`` (default: this process's environment) narrowed to the selected GPUs by their backend's
    variable (``CUDA_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES``, ``ZE_AFFINITY_MASK``, ``GGML_VK_VISIBLE_DEVICES``).

    Give it to the child process that initialises the runtime; the caller's environment is not touched.
    """
    env = dict(os.environ if base is None else base)
    if selection.visibility is not None:
        variable, value = selection.visibility
        env[variable] = value
    return env
