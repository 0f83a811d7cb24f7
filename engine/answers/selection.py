"""GPU selection for an estimate: which of this machine's GPUs a run should use, and why.

Selection follows docs/unsloth-profile.md#multi-gpu and the placement rule of
:mod:`vramwise.answers.placement`: explicit ids are validated against the parent-visible set and
all used; otherwise GPUs are ranked by free memory and added one at a time, the first counting its
full free memory and each further one a share of it (the profile's ``selection.further_gpu_share``,
0.85 in the bundled profiles), until the set fits by that rule. On several GPUs a run without a
strategy is judged by what the best strategy its profile models places on each
(:meth:`~vramwise.answers.placement.Placer.place`, the figure ``estimate`` prints), named in the
reason and in ``strategy``; by the profile's split rule only where that is the profile's own
placement. The GPUs themselves come from :func:`vramwise.gpus.discovery.discover_gpus` (NVML).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from vramwise.answers.placement import GpuSet, Placement, Placer, pooled_bytes
from vramwise.errors import GpuSelectionError, VramwiseError
from vramwise.estimation.estimate import estimate
from vramwise.profiles.settings import DEFAULT_PROFILE
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

    @property
    def device_map(self) -> str:
        return device_map(self)

    @property
    def cuda_visible_devices(self) -> str | None:
        """Value for a child process's CUDA_VISIBLE_DEVICES (None: leave it as inherited)."""
        if self.mode == "inherit_parent_visible":
            return self.inherited_visible_devices
        if self.mode == "non_cuda":
            return None
        return ",".join(str(i) for i in self.gpu_ids)

    def to_dict(self) -> dict:
        return {
            "gpu_ids": list(self.gpu_ids), "mode": self.mode, "required_bytes": self.required_bytes,
            "usable_bytes": self.usable_bytes, "min_per_gpu_bytes": self.min_per_gpu_bytes, "fits": self.fits,
            "reason": self.reason, "strategy": self.strategy, "device_map": self.device_map, "cuda_visible_devices": self.cuda_visible_devices,
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


def _explicit(ids: Sequence[Any], disc: GpuDiscovery) -> tuple:
    if disc.uses_uuids:
        raise GpuSelectionError(
            f"explicit GPU ids {list(ids)} cannot be honoured: CUDA_VISIBLE_DEVICES={disc.cuda_visible_devices!r} "
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
    count = len(disc.gpus)
    beyond = [i for i in ids if i >= count]
    if beyond:
        raise GpuSelectionError(f"GPU ids {beyond} exceed the {count} physical GPU(s) of this machine (ids 0-{count - 1})")
    hidden = [i for i in ids if i not in disc.visible]
    if hidden:
        raise GpuSelectionError(
            f"GPU ids {hidden} are not visible to this process (CUDA_VISIBLE_DEVICES={disc.cuda_visible_devices!r}; "
            f"visible: {list(disc.visible)})"
        )
    return tuple(ids)


def _non_cuda(disc: GpuDiscovery, est: Any) -> GpuSelection:
    """No NVIDIA GPU: CUDA_VISIBLE_DEVICES selects nothing. Where another backend reports a unified-memory device
    (Apple Silicon), the answer is judged against what its GPU may use, and its reason says so in one line."""
    reason = disc.reason or "no NVIDIA GPU visible"
    unified = [d for b in disc.backends if b.backend != "nvidia" for d in b.devices
               if d.unified and d.index in b.visible]
    if not unified:
        return GpuSelection((), "non_cuda", est.total if est else None, None, None, None, reason)
    dev = unified[0]
    fits = None if est is None else est.total <= dev.total
    verdict = "" if est is None else (f"; the estimate ({est.total / 2**30:.2f} GiB) "
                                      + ("fits it" if fits else "does not fit it"))
    return GpuSelection((), "non_cuda", est.total if est else None, dev.total, None, fits,
                        f"{reason}; {dev.backend} {dev.index} ({dev.name}): {dev.unified_line()}{verdict}")


def select_gpus(
    estimate_or_model: Any = None,
    *,
    gpu_ids: Sequence[int] | None = None,
    discovery: GpuDiscovery | None = None,
    nvml: NvmlBackend | None = None,
    env: Mapping[str, str] | None = None,
    **estimate_kwargs: Any,
) -> GpuSelection:
    """Choose GPUs for a run: explicit ``gpu_ids`` (validated, all used) or automatically from free memory.

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
    if not disc.gpus:
        if gpu_ids:
            raise GpuSelectionError(f"GPU ids {list(gpu_ids)} were asked for, but {disc.reason}")
        return _non_cuda(disc, est)
    required = est.total if est else None

    share = _further_gpu_share(est)

    placer = Placer(estimate_kwargs.get("registry"))  # this selection's

    def figures(ids: tuple) -> tuple[int, Placement | None, bool | None]:
        gpus = GpuSet.of([disc.gpu(i).free for i in ids])  # the first id's GPU counted in full
        usable = int(pooled_bytes(gpus, share))
        if est is None:
            return usable, None, None
        placed = placer.place(est, len(ids))
        return usable, placed, placed.fits(gpus, share)

    def best(placed: Placement | None) -> str | None:
        return placed.strategy if placed is not None and placed.best else None

    if gpu_ids is not None:
        ids = _explicit(list(gpu_ids), disc)
        usable, placed, ok = figures(ids)
        why = f"using the requested GPUs {list(ids)}"
        if placed is not None and placed.refused is not None:
            why += f"; no multi-GPU strategy runs the estimate on {len(ids)} GPUs ({placed.refused})"
        elif ok is False:
            why += "; the estimate may not fit on them" + (f" with {best(placed)}" if best(placed) else "")
        elif best(placed):
            why += f", with {best(placed)}"
        return GpuSelection(ids, "explicit", required, usable, placed and placed.per_gpu, ok, why,
                            tuple(disc.gpu(i) for i in ids), strategy=best(placed))
    if disc.uses_uuids:
        return GpuSelection(
            disc.visible, "inherit_parent_visible", required, None, None, None,
            f"CUDA_VISIBLE_DEVICES={disc.cuda_visible_devices!r} names GPUs by UUID or MIG id; keeping the parent's devices",
            tuple(disc.gpu(i) for i in disc.visible), inherited_visible_devices=disc.cuda_visible_devices,
        )
    if not disc.visible:
        raise GpuSelectionError(disc.reason or "no GPU is visible to this process")
    if est is None:
        ids = disc.visible
        usable, _, _ = figures(ids)
        why = "no estimate could be made" + (f" ({est_problem})" if est_problem else "") + "; using every visible GPU"
        return GpuSelection(ids, "fallback_all", None, usable, None, None, why, tuple(disc.gpu(i) for i in ids))
    ranked = sorted(disc.visible, key=lambda i: (-disc.gpu(i).free, i))
    for n in range(1, len(ranked) + 1):
        ids = tuple(ranked[:n])
        usable, placed, ok = figures(ids)
        if ok:
            if best(placed):  # a strategy places the run: each GPU holds its rank, nothing is pooled
                why = (f"{n} GPU(s) with the most free memory hold the estimate with {best(placed)} "
                       f"({placed.per_gpu / 2**30:.2f} GiB per GPU, {min(disc.gpu(i).free for i in ids) / 2**30:.2f} "
                       "GiB free on the smallest)")
            else:
                why = (f"{n} GPU(s) with the most free memory cover the estimate ({required / 2**30:.2f} GiB needed, "
                       f"{usable / 2**30:.2f} GiB usable, {placed.per_gpu / 2**30:.2f} GiB per GPU)")
            return GpuSelection(ids, "auto", required, usable, placed.per_gpu, True, why,
                                tuple(disc.gpu(i) for i in ids), strategy=best(placed))
    ids = tuple(ranked)
    usable, placed, _ = figures(ids)
    on_all = (f"{placed.per_gpu / 2**30:.2f} GiB per GPU on all {len(ids)} with {best(placed)}" if best(placed)
              else f"{usable / 2**30:.2f} GiB usable on all {len(ids)}")
    return GpuSelection(
        ids, "fallback_all", required, usable, placed.per_gpu, False,
        f"no set of visible GPUs covers the estimate ({required / 2**30:.2f} GiB needed, {on_all}); using all of "
        "them, the run may not fit",
        tuple(disc.gpu(i) for i in ids), strategy=best(placed),
    )


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
    """A copy of ``base`` (default: this process's environment) narrowed to the selected GPUs.

    Give it to the child process that initialises CUDA; the caller's environment is not touched.
    """
    env = dict(os.environ if base is None else base)
    value = selection.cuda_visible_devices
    if value is not None:
        env["CUDA_VISIBLE_DEVICES"] = value
    return env
