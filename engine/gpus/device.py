"""One device as a discovery backend reports it, and one backend's report: the values every backend shares."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NVIDIA", "GpuInfo", "BackendReport"]

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

    def to_dict(self) -> dict:
        return {"backend": self.backend, "devices": [vars(d).copy() for d in self.devices],
                "visible": list(self.visible), "variable": self.variable, "variable_value": self.variable_value,
                "reason": self.reason}
