"""What a measured run reports: the figures of each phase, of each process, and of the whole run.

Plain frozen dataclasses of ints (bytes) and strings: building them needs no torch, and
``to_dict`` gives the JSON that ``vramwise measure --json`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["PhaseFigures", "RankFigures", "Measurement"]


@dataclass(frozen=True)
class PhaseFigures:
    """Memory of one phase of the training step, in bytes."""

    peak: int  # highest tensor bytes during the phase (max_memory_allocated on CUDA)
    end: int  # tensor bytes alive at its end
    reserved_peak: int | None = None  # CUDA caching allocator's reserve (max_memory_reserved)
    categories: Mapping[str, int] = field(default_factory=dict)  # at the end of the phase

    def to_dict(self) -> dict:
        return {"peak": self.peak, "end": self.end, "reserved_peak": self.reserved_peak,
                "categories": dict(self.categories)}


@dataclass(frozen=True)
class RankFigures:
    """What one process of a distributed run used (bytes)."""

    rank: int
    peak: int
    peak_phase: str
    phases: Mapping[str, PhaseFigures]

    def to_dict(self) -> dict:
        return {"rank": self.rank, "peak": self.peak, "peak_phase": self.peak_phase,
                "phases": {k: v.to_dict() for k, v in self.phases.items()}}


@dataclass(frozen=True)
class Measurement:
    """What a measured run used."""

    device: str
    method: str
    settings: Mapping[str, Any]
    params_total: int
    params_trainable: int
    peak: int  # highest tensor bytes over the measured steps
    peak_phase: str
    phases: Mapping[str, PhaseFigures]  # load, forward, backward, optimizer (of the last step)
    reserved_peak: int | None = None
    process_bytes: int | None = None  # NVML: the process's device memory, CUDA context included
    notes: tuple = ()
    strategy: str | None = None  # ddp, fsdp or fsdp_shard_grad_op when world_size processes ran the step
    world_size: int | None = None
    per_rank: tuple | None = None  # RankFigures of each process (peak and phases are then the highest rank's)
    # on the CPU: the peak reserve of torch's CUDA caching allocator for the same allocations and frees, from
    # vramwise.profiles.caching_allocator (the default configuration, one stream); None where no trace was kept
    modelled_reserved_peak: int | None = None

    def to_dict(self) -> dict:
        return {
            "device": self.device, "method": self.method, "settings": dict(self.settings),
            "params_total": self.params_total, "params_trainable": self.params_trainable,
            "peak": self.peak, "peak_phase": self.peak_phase, "reserved_peak": self.reserved_peak,
            "process_bytes": self.process_bytes,
            "phases": {k: v.to_dict() for k, v in self.phases.items()},
            "notes": list(self.notes),
            "strategy": self.strategy, "world_size": self.world_size,
            "per_rank": None if self.per_rank is None else [r.to_dict() for r in self.per_rank],
            "modelled_reserved_peak": self.modelled_reserved_peak,
        }
