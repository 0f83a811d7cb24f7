"""One device as a discovery backend reports it, one backend's report, and the visibility-list rule CUDA and
ROCm share: the values every backend uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["NVIDIA", "GpuInfo", "BackendReport", "VisibleList", "parse_visible_list"]

NVIDIA = "nvidia"  # the NVML backend's name in GpuInfo.backend and GpuDiscovery.backends


@dataclass(frozen=True)
class GpuInfo:
    """One physical device as its backend reports it (bytes); ``used``/``free`` are None where the
    backend cannot tell what other processes use."""

    index: int  # physical index within its backend
    uuid: str
    name: str
    total: int  # for a unified-memory device: what its GPU may use (the working set), not the machine's memory
    used: int | None
    free: int | None
    backend: str = NVIDIA
    visibility_variable: str | None = "CUDA_VISIBLE_DEVICES"  # the variable that selects it; None where none does
    unified: bool = False  # memory shared with the CPU (Apple Silicon)
    memory_source: str | None = None  # where ``total`` comes from, where it is not the driver's device memory
    system_memory: int | None = None  # a unified-memory device: the system's memory, of which ``total`` is the GPU's share
    device_type: str | None = None  # where the backend tells: "discrete", "integrated", "virtual" (Vulkan's deviceType)
    driver: str | None = None  # where the backend tells: the driver's name and version (Vulkan's driverName, driverInfo)
    vendor_id: int | None = None  # where the backend tells: the PCI vendor id (Vulkan's vendorID)

    def unified_line(self) -> str | None:
        """For a unified-memory device, one line: what its GPU may use of the system's memory and where the figure
        comes from; None for dedicated memory."""
        if not self.unified:
            return None
        of = f" of the system's {self.system_memory / 2**30:.2f} GiB" if self.system_memory else ""
        share = f" ({100 * self.total / self.system_memory:.1f} %)" if self.system_memory else ""
        return (f"unified memory: the GPU may use {self.total / 2**30:.2f} GiB{of}{share}, from "
                f"{self.memory_source or 'the device'}; the OS and other processes keep the rest")


@dataclass(frozen=True)
class BackendReport:
    """What one backend found: its devices, those visible under its variable, or why none."""

    backend: str
    devices: tuple = ()  # GpuInfo, in the backend's physical order
    visible: tuple = ()  # physical indices (GpuInfo.index) the process may use, in runtime order
    variable: str | None = None  # the visibility variable it applies
    variable_value: str | None = None  # its raw value; None when unset
    reason: str | None = None  # why no device is found or visible, or what the variable hides
    selector: str | None = None  # the variable a child process sets to choose among the visible devices
    selector_base: tuple = ()  # the physical indices the selector's entries number, in order; (): the indices themselves

    def selector_value(self, indices: Sequence[int]) -> str | None:
        """The ``selector`` value that gives a child process the devices of physical ``indices``, in that order."""
        if self.selector is None:
            return None
        base = list(self.selector_base)
        return ",".join(str(base.index(i) if base else i) for i in indices)

    def to_dict(self) -> dict:
        return {"backend": self.backend, "devices": [vars(d).copy() for d in self.devices],
                "visible": list(self.visible), "variable": self.variable, "variable_value": self.variable_value,
                "reason": self.reason, "selector": self.selector, "selector_base": list(self.selector_base)}


@dataclass(frozen=True)
class VisibleList:
    """What a visibility list names: positions in the device list, in the list's order."""

    indices: tuple = ()
    uses_uuids: bool = False  # an entry names a device by UUID (or a MIG instance)
    problem: str | None = None  # the entry that ended the list, where one did


def parse_visible_list(spec: str, count: int, uuids: Sequence[str] = (), *, bare_uuid_prefixes: bool = False,
                       mig_entries: bool = False) -> VisibleList:
    """The devices a ``0,2``-style visibility list names among ``count`` devices (``uuids`` their UUIDs, ``GPU-...``).

    The rule CUDA's ``CUDA_VISIBLE_DEVICES`` and ROCm's ``ROCR_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES``
    share: comma-separated entries, each an index or a UUID; the first entry that names no device (an index
    out of range or negative, a device named twice, a UUID that matches no device or several) ends the list,
    the entries before it stand (CUDA C++ Programming Guide, "CUDA Environment Variables"; ROCm, "GPU
    isolation techniques"). A blank list names nothing. What the runtimes document differently is a parameter:

    - ``bare_uuid_prefixes``: CUDA takes any unique prefix of a GPU UUID, with or without ``GPU-``; ROCr
      takes ``GPU-`` followed by the UUID or a prefix of it, or the whole UUID without ``GPU-``.
    - ``mig_entries``: CUDA's ``MIG-<uuid>`` entries name MIG instances, which a list of physical GPUs does
      not hold: they are accepted (``uses_uuids``) without an index.
    """
    out: list[int] = []
    uses_uuids = False
    if not spec.strip():
        return VisibleList()
    for e in (x.strip() for x in spec.split(",")):
        if e.lstrip("-").isdigit():
            i = int(e)
            if i < 0 or i >= count or i in out:
                return VisibleList(tuple(out), uses_uuids, f"entry {e!r} names no device: the list ends there")
            out.append(i)
            continue
        if e:
            uses_uuids = True
        if mig_entries and e.startswith("MIG-"):
            continue
        if bare_uuid_prefixes:
            match = [k for k, u in enumerate(uuids) if e and u and (u.startswith(e) or u.startswith("GPU-" + e))]
        else:
            match = [k for k, u in enumerate(uuids)
                     if e and u and (u == e or u == "GPU-" + e or e.startswith("GPU-") and u.startswith(e))]
        if len(match) != 1 or match[0] in out:
            return VisibleList(tuple(out), uses_uuids, f"entry {e!r} names no device: the list ends there")
        out.append(match[0])
    return VisibleList(tuple(out), uses_uuids)
