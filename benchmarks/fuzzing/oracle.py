"""The oracle: what counts as a sane result, a documented error or a finding."""

from __future__ import annotations

import json
import os
import traceback
from dataclasses import dataclass, field

import vramwise

#: A case may take at most this much CPU time (seconds) in the campaign (benchmarks/fuzz.py) ...
TIME_LIMIT_S = 1.0
#: ... and in the test suite, whose machine may be busy with other work: CPU seconds counted on a
#: loaded machine vary severalfold, so the suite's bound catches hangs and runaway growth, and the
#: campaign, run alone, holds every case to TIME_LIMIT_S.
SUITE_TIME_LIMIT_S = 5.0
#: ... and raise the worker's resident memory by at most this much (MB) above what it held before.
MEMORY_LIMIT_MB = 200
#: GPU counts min_per_gpu is asked for.
GPU_COUNTS = range(1, 9)

_ENGINE = os.path.dirname(os.path.abspath(vramwise.__file__))


class Insane(AssertionError):
    """An estimate that came back but breaks an invariant (raised by :func:`check_estimate`)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@dataclass
class Outcome:
    """The verdict on one case.

    ``status`` is ``ok``, ``error`` (documented error; ``label`` is its class or ``exit 2``) or
    ``finding``; a finding's ``label`` is its kind (``exception:TypeError@_model.py:fn``,
    ``insane:negative``, ``slow``, ``memory``, ``timeout``, ``crash``).
    """

    status: str
    label: str = ""
    detail: str = ""
    cpu_s: float = 0.0
    wall_s: float = 0.0
    mem_mb: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.status if self.status == "ok" else f"{self.status}:{self.label}"

    def to_dict(self) -> dict:
        return {"status": self.status, "label": self.label, "detail": self.detail[:500],
                "cpu_s": round(self.cpu_s, 4), "wall_s": round(self.wall_s, 4), "mem_mb": round(self.mem_mb, 1)}


def _is_count(v) -> bool:
    return type(v) is int


def check_estimate(e) -> None:
    """Raise :class:`Insane` unless ``e`` is a sane :class:`vramwise.Estimate`.

    Documented errors raised lazily by an accessor (``min_per_gpu`` evaluating a formula) pass through.
    """
    for c in vramwise.COMPONENTS:
        v = getattr(e, c)
        if not _is_count(v):
            raise Insane("not-int", f"component {c} = {v!r} ({type(v).__name__})")
        if v < 0:
            raise Insane("negative", f"component {c} = {v}")
    t = e.total
    if not _is_count(t):
        raise Insane("not-int", f"total = {t!r} ({type(t).__name__})")
    if t <= 0:
        raise Insane("total<=0", f"total = {t}")
    for what, value in (("params_total", e.params_total), ("params_trainable", e.params_trainable)):
        if not _is_count(value):
            raise Insane("not-int", f"{what} = {value!r} ({type(value).__name__})")
        if value < 0:
            raise Insane("negative", f"{what} = {value}")
    for group in ("phases", "figures"):
        for k, v in getattr(e, group).items():
            if not _is_count(v):
                raise Insane("not-int", f"{group}[{k!r}] = {v!r} ({type(v).__name__})")
            if v < 0:
                raise Insane("negative", f"{group}[{k!r}] = {v}")
    for n in GPU_COUNTS:
        v = e.min_per_gpu(n)
        if not _is_count(v):
            raise Insane("not-int", f"min_per_gpu({n}) = {v!r} ({type(v).__name__})")
        if v < 0:
            raise Insane("negative", f"min_per_gpu({n}) = {v}")
    if e.strategy is not None:  # a multi-GPU strategy: every rank group and the host memory as well
        for r in e.per_rank:
            for what, v in (("count", r.count), ("total", r.total), *r.components.items()):
                if not _is_count(v) or v < 0 or (what == "total" and v == 0):
                    raise Insane("rank", f"per_rank {r.role!r} {what} = {v!r}")
        if not _is_count(e.host_bytes) or e.host_bytes < 0:
            raise Insane("host", f"host_bytes = {e.host_bytes!r}")
    try:
        json.dumps(e.to_dict(), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise Insane("json", f"to_dict() is not strict JSON: {exc}") from None


def strict_json(text: str) -> None:
    """Raise ValueError unless ``text`` is JSON without NaN/Infinity."""
    def bad(name):
        raise ValueError(f"non-standard JSON constant {name}")
    json.loads(text, parse_constant=bad)


def where(exc: BaseException) -> str:
    """``file.py:function`` of the deepest frame of the traceback inside the engine (else the deepest)."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if os.path.abspath(f.filename).startswith(_ENGINE + os.sep)]
    f = (inside or frames or [None])[-1]
    if f is None:
        return "?"
    return f"{os.path.basename(f.filename)}:{f.name}"


def classify(exc: BaseException, data_under_test: bool = False) -> Outcome:
    """The outcome of a call that raised ``exc``.

    An InternalError (the engine caught its own insane result) is a bug of the engine or of the
    data files it loaded: a finding with the bundled files, but a documented rejection, with the
    formula's location, when the case is a hostile data file (``data_under_test``)."""
    if isinstance(exc, Insane):
        return Outcome("finding", f"insane:{exc.kind}", str(exc))
    if type(exc).__name__ == "InternalError" and not data_under_test:
        return Outcome("finding", f"internal@{where(exc)}", f"InternalError: {' '.join(str(exc).split())[:300]}")
    if isinstance(exc, vramwise.VramwiseError):
        return Outcome("error", type(exc).__name__, str(exc)[:300])
    if isinstance(exc, MemoryError):
        return Outcome("finding", f"memory@{where(exc)}", f"MemoryError at {where(exc)}")
    msg = " ".join(str(exc).split())[:300]
    return Outcome("finding", f"exception:{type(exc).__name__}@{where(exc)}", f"{type(exc).__name__}: {msg}")
