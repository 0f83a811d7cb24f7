"""GPU discovery: the accelerators of this machine and the ones visible to this process.

NVIDIA GPUs come from NVML, as before; the backends of :mod:`vramwise.gpus.backends` (AMD, Intel XPU,
Apple Silicon, Vulkan) are tried after it, each with its own visibility variable; Vulkan's leaves out the
devices the backends before it report, so that each GPU is listed once. ``gpus``, ``visible`` and
``reason`` stay NVIDIA's (what ``select`` places CUDA runs on); ``backends`` holds every backend's
report and ``devices`` every device found. A host with no device says, per backend, why it found none.

The NVML layer is an object with four methods (``init``, ``shutdown``,
``device_count``, ``device``); :class:`PynvmlBackend` wraps ``pynvml`` and
tests pass a fake. Discovery never raises an NVML exception: without a driver
it returns a result that says why no GPU is visible.

Choosing GPUs for an estimate is an answer built on this: :mod:`vramwise.answers.selection`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

from vramwise.gpus.backends import BackendReport, default_backends
from vramwise.gpus.device import NVIDIA, GpuInfo, parse_visible_list

__all__ = ["GpuInfo", "GpuDiscovery", "NvmlBackend", "PynvmlBackend", "NVIDIA", "discover_gpus"]



class NvmlBackend(Protocol):
    """What discovery needs from NVML."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def device_count(self) -> int: ...
    def device(self, index: int) -> tuple[str, str, int, int, int]:
        """(uuid, name, total bytes, used bytes, free bytes) of physical GPU ``index``."""
        ...


class PynvmlBackend:
    """NVML through the ``pynvml`` module of nvidia-ml-py."""

    def __init__(self) -> None:
        import pynvml  # imported here: the package must import on machines without it

        self._nvml = pynvml

    def init(self) -> None:
        self._nvml.nvmlInit()

    def shutdown(self) -> None:
        self._nvml.nvmlShutdown()

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def device(self, index: int) -> tuple[str, str, int, int, int]:
        n = self._nvml
        h = n.nvmlDeviceGetHandleByIndex(index)
        uuid = n.nvmlDeviceGetUUID(h)
        name = n.nvmlDeviceGetName(h)
        mem = n.nvmlDeviceGetMemoryInfo(h)
        as_text = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731 - older bindings return bytes
        return as_text(uuid), as_text(name), int(mem.total), int(mem.used), int(mem.free)


@dataclass(frozen=True)
class GpuDiscovery:
    """The GPUs of this machine and those visible to this process."""

    gpus: tuple  # every physical GPU, in physical order
    visible: tuple  # physical indices visible to this process (CUDA_VISIBLE_DEVICES order)
    cuda_visible_devices: str | None  # the raw variable; None when unset
    uses_uuids: bool  # CUDA_VISIBLE_DEVICES names GPUs by UUID or MIG id
    reason: str | None = None  # why no GPU is visible, when none is
    backends: tuple = ()  # BackendReport of each backend tried, NVML first

    @property
    def available(self) -> bool:
        return bool(self.visible) or (self.uses_uuids and bool(self.gpus))

    @property
    def devices(self) -> tuple:
        """Every device of every backend, NVIDIA's first."""
        return tuple(d for b in self.backends for d in b.devices) if self.backends else self.gpus

    def report(self) -> tuple:
        """One line per backend that found nothing or hides something: ``backend: why``."""
        return tuple(f"{b.backend}: {b.reason}" for b in self.backends if b.reason)

    def gpu(self, index: int) -> GpuInfo:
        return next(g for g in self.gpus if g.index == index)

    def to_dict(self) -> dict:
        return {
            "gpus": [vars(g).copy() for g in self.gpus],
            "visible": list(self.visible),
            "cuda_visible_devices": self.cuda_visible_devices,
            "uses_uuids": self.uses_uuids,
            "reason": self.reason,
            "backends": [b.to_dict() for b in self.backends],
        }


def _parse_visible(spec: str | None, gpus: Sequence[GpuInfo]) -> tuple[tuple, bool, str | None]:
    """(visible physical indices, names GPUs by UUID/MIG, reason when none) for CUDA_VISIBLE_DEVICES: the list rule
    of :func:`~vramwise.gpus.device.parse_visible_list`, with CUDA's UUID prefixes and MIG entries."""
    if spec is None:
        return tuple(g.index for g in gpus), False, None
    if spec.strip() == "":
        return (), False, "CUDA_VISIBLE_DEVICES is empty: no GPU is visible to this process"
    named = parse_visible_list(spec, len(gpus), [g.uuid for g in gpus], bare_uuid_prefixes=True, mig_entries=True)
    visible = tuple(gpus[k].index for k in named.indices)
    reason = None if visible or named.uses_uuids else f"CUDA_VISIBLE_DEVICES={spec!r} names no GPU of this machine"
    return visible, named.uses_uuids, reason


def discover_gpus(nvml: NvmlBackend | None = None, env: Mapping[str, str] | None = None,
                  backends: Sequence | None = None, runner: Callable | None = None) -> GpuDiscovery:
    """Every device of every backend and the ones visible to this process; never raises for a missing
    driver or tool. ``backends`` replaces the ones tried after NVML (:func:`~vramwise.gpus.backends.default_backends`,
    whose commands go through ``runner``)."""
    env = os.environ if env is None else env
    disc = _discover_nvidia(nvml, env)
    nvidia = BackendReport(NVIDIA, disc.gpus, disc.visible, "CUDA_VISIBLE_DEVICES", disc.cuda_visible_devices, disc.reason,
                           selector="CUDA_VISIBLE_DEVICES")
    reports = [nvidia]
    for b in default_backends(runner) if backends is None else backends:
        report = b.discover(env)
        defer = getattr(b, "without_devices_of", None)  # a backend that leaves out the devices others report
        reports.append(defer(report, tuple(reports)) if defer is not None else report)
    return dataclasses.replace(disc, backends=tuple(reports))


def _discover_nvidia(nvml: NvmlBackend | None, env: Mapping[str, str]) -> GpuDiscovery:
    spec = env.get("CUDA_VISIBLE_DEVICES")
    try:
        backend = nvml if nvml is not None else PynvmlBackend()
    except ImportError:
        return GpuDiscovery((), (), spec, False, "no NVIDIA GPU visible: the nvidia-ml-py package (pynvml) is not installed")
    try:
        backend.init()
    except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return GpuDiscovery((), (), spec, False, f"no NVIDIA GPU visible: NVML could not start ({_nvml_text(e)})")
    try:
        gpus = []
        for i in range(backend.device_count()):
            uuid, name, total, used, free = backend.device(i)
            gpus.append(GpuInfo(i, uuid, name, total, used, free))
    except Exception as e:  # noqa: BLE001
        return GpuDiscovery((), (), spec, False, f"no NVIDIA GPU visible: NVML failed while listing GPUs ({_nvml_text(e)})")
    finally:
        try:
            backend.shutdown()
        except Exception:  # noqa: BLE001 - shutting down a half-started NVML is best effort
            pass
    if not gpus:
        return GpuDiscovery((), (), spec, False, "no NVIDIA GPU visible: NVML reports no devices")
    visible, uses_uuids, reason = _parse_visible(spec, gpus)
    return GpuDiscovery(tuple(gpus), visible, spec, uses_uuids, reason)


def _nvml_text(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
