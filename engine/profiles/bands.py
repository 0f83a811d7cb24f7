"""The error of an estimate as two bands, tensors and device, each saying what it covers (:class:`ErrorBands`).

* ``tensors``: how far the validation matrices' estimates were from the measured peaks of live tensors in
  CPU training steps, by profile x method x multi-GPU strategy, eager or compiled (:class:`ErrorBand`);
* ``device``: how far the estimates' device totals were from the totals of published GPU runs of the same
  profile and method (:class:`DeviceBand`), the band fit's default headroom comes from.

Tensor bands

The figures live in ``accuracy/bands.yaml`` (installed as ``vramwise.accuracy``) under
``schemas/accuracy-1.schema.json``, written by ``scripts/build_accuracy_bands.py`` from the cells of
benchmarks/validation_matrices.py (measured on CPU, as docs/accuracy.md lists them); nothing in them is
typed in. :meth:`Estimate.error_band <vramwise.Estimate.error_band>` looks its cell up here:

* a measured (profile, method, strategy) gives the number of cells, the median and the largest
  |estimate / measured - 1|, the world sizes and the matrices they come from;
* anything else is an unmeasured band saying why: a profile or method the file lists as not measured
  (unsloth runs kernels on CUDA GPUs only; studio reproduces the reference estimator; size_only;
  inference), a strategy measured on another profile only, or a combination no matrix has. LoRA on a
  4-bit base counts as qlora.

The bands describe the bundled profiles: a profile read from another formulas folder is not measured.
The bundled file is read once, when an estimate first asks (``bundled_bands.cache_clear()`` forgets it).

Device bands

The figures live in ``accuracy/device_bands.yaml`` under ``schemas/device-bands-1.schema.json``, written by
``python benchmarks/gpu_runs.py --device-bands`` from the corpus of published GPU runs
(benchmarks/gpu_runs/*.yaml) scored against the estimates: the runs whose statistic is a device total
(:data:`DEVICE_STATISTICS`: torch's reserved peak, nvidia-smi, a total of unstated reading; not the allocated or
active peaks, which are tensor peaks, nor the largest sequence or batch, which are boundaries), pooled by the
profile the scorer estimates them with and the method (every framework, or stack, of that profile together).
A band gives the number of runs, the median and 90th percentile of |estimate / published - 1|, the signed
median, and the 90th percentile of the shortfall max(0, 1 - estimate / published): the share of a GPU an
estimate keeps free so that nine runs in ten like these fit (fit's default headroom). A profile and method
no run covers has a band that says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from vramwise.rules.datafiles import DataFile, load_data_file, package_files, read_data_text
from vramwise.errors import FileFormatError

__all__ = ["ErrorBand", "BandTable", "read_bands", "bundled_bands", "band_for", "percent", "BANDS_PATH",
           "DeviceBand", "DeviceBandTable", "ErrorBands", "read_device_bands", "bundled_device_bands",
           "device_band_for", "DEVICE_BANDS_PATH", "DEVICE_STATISTICS"]

#: Display path of the bundled bands in error messages.
BANDS_PATH = "accuracy/bands.yaml"
_SCHEMA = "accuracy-1.schema.json"
#: Display path of the bundled device bands in error messages.
DEVICE_BANDS_PATH = "accuracy/device_bands.yaml"
_DEVICE_SCHEMA = "device-bands-1.schema.json"
#: The corpus statistics that are a device total: torch's reserved peak (the caching allocator's whole
#: holding), nvidia-smi's figure (the process on the device), a total of unstated reading.
DEVICE_STATISTICS = ("torch_max_reserved", "nvidia_smi", "total_reported")


def percent(x: float | None, space: str = " ") -> str | None:
    """An error as a percentage with two decimals (``0.000233`` -> ``0.02 %``); None stays None."""
    return None if x is None else f"{100 * x:.2f}{space}%"


def _sizes(sizes: tuple) -> str:
    words = [str(n) for n in sizes]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


@dataclass(frozen=True)
class ErrorBand:
    """The validated error of one (profile, method, strategy): measured, or why it is not.

    Errors are fractions of the measured peak (0.01 is 1 %), of the estimate's tensor peak against the
    peak of live tensors in CPU training steps. ``strategy`` is ``"none"`` for one GPU.
    """

    profile: str
    method: str
    strategy: str
    measured: bool
    cells: int = 0  # measured cells pooled (0: not measured)
    median_abs_error: float | None = None
    max_abs_error: float | None = None
    world_sizes: tuple = ()  # the GPU counts the cells ran on
    matrices: tuple = ()  # the validation matrices of the cells
    generated: str | None = None  # the day they were measured
    commit: str | None = None  # the commit they were measured at
    reason: str | None = None  # why it is not measured
    compile: bool = False  # the band of steps run under torch.compile

    def where(self) -> str:
        compiled = ", compiled" if self.compile else ""
        if self.strategy == "none":
            return "one GPU" + compiled
        return (f"{self.strategy} on {_sizes(self.world_sizes)} GPUs" if self.world_sizes else self.strategy) + compiled

    def line(self) -> str:
        """One line for a person: ``tensors: median |error| 0.02 %, largest 0.63 % over 40 CPU-measured
        cells (hf, lora, one GPU)``, or ``tensors: not measured (...): why``."""
        cell = f"{self.profile}, {self.method}, {self.where()}"
        if not self.measured:
            return f"tensors: not measured ({cell}): {self.reason}"
        return (f"tensors: median |error| {percent(self.median_abs_error)}, largest {percent(self.max_abs_error)} "
                f"over {self.cells} CPU-measured cell{'s' if self.cells != 1 else ''} ({cell})")

    def to_dict(self) -> dict:
        return {"measured": self.measured, "profile": self.profile, "method": self.method, "strategy": self.strategy,
                "compile": self.compile, "cells": self.cells, "median_abs_error": self.median_abs_error, "max_abs_error": self.max_abs_error,
                "world_sizes": list(self.world_sizes), "matrices": list(self.matrices), "generated": self.generated,
                "commit": self.commit, "reason": self.reason, "summary": self.line()}


class BandTable:
    """The bands of one file, checked: no (profile, method, strategy, compile) twice, none for what the file calls
    unmeasured, the largest error at least the median."""

    def __init__(self, df: DataFile):
        self.file = df
        problems: list[str] = []
        self._bands: dict[tuple, ErrorBand] = {}
        self._unmeasured: dict[tuple, str] = {}  # ("profile" | "method", name) -> reason
        for k, u in enumerate(df.data["unmeasured"]):
            kind = "profile" if "profile" in u else "method"
            if (kind, u[kind]) in self._unmeasured:
                problems.append(df.problem(("unmeasured", k, kind), f"{kind} {u[kind]!r} is listed twice"))
            self._unmeasured[(kind, u[kind])] = u["reason"]
        for k, b in enumerate(df.data["bands"]):
            key = (b["profile"], b["method"], b["strategy"], b.get("compile", False))
            if key in self._bands:
                problems.append(df.problem(("bands", k), "/".join(key[:3]) + ("/compiled" if key[3] else "")
                                           + " is given twice"))
            for kind in ("profile", "method"):
                if (kind, b[kind]) in self._unmeasured:
                    problems.append(df.problem(("bands", k, kind), f"{kind} {b[kind]!r} is listed as unmeasured"))
            if b["max_abs_error"] < b["median_abs_error"]:
                problems.append(df.problem(("bands", k, "max_abs_error"), "below the median"))
            self._bands[key] = ErrorBand(
                *key[:3], compile=key[3], measured=True, cells=b["cells"], median_abs_error=b["median_abs_error"],
                max_abs_error=b["max_abs_error"], world_sizes=tuple(b["world_sizes"]), matrices=tuple(b["matrices"]),
                generated=b["generated"], commit=b["commit"])
        if problems:
            raise FileFormatError(problems)

    def bands(self) -> tuple:
        """Every measured band, in file order."""
        return tuple(self._bands.values())

    def band(self, profile: str, method: str, strategy: str | None = "none", *, load_in_4bit: bool = False,
             compile: bool = False) -> ErrorBand:
        """The band of ``profile`` x ``method`` x ``strategy`` (None or "none": one GPU), of compiled steps
        when ``compile``."""
        strategy = strategy or "none"
        if method == "lora" and load_in_4bit:
            method = "qlora"
        got = self._bands.get((profile, method, strategy, bool(compile)))
        if got is not None:
            return got
        return ErrorBand(profile, method, strategy, measured=False, compile=bool(compile),
                         reason=self._why(profile, method, strategy, bool(compile)))

    def _why(self, profile: str, method: str, strategy: str, compile: bool = False) -> str:
        for kind, name in (("method", method), ("profile", profile)):
            if (kind, name) in self._unmeasured:
                return self._unmeasured[(kind, name)]
        if strategy != "none":
            elsewhere = sorted({p for p, _, s, _ in self._bands if s == strategy and p != profile})
            if elsewhere and not any(p == profile and s == strategy for p, _, s, _ in self._bands):
                return f"{strategy} is measured on {', '.join(elsewhere)} only"
            if not elsewhere and not any(s == strategy for _, _, s, _ in self._bands):
                return f"no validation matrix runs {strategy}"
        if compile and not any(c and p == profile for p, _, _, c in self._bands):
            return f"no validation matrix compiles the {profile} profile's step"
        return "no validation matrix has this cell"


def read_bands(text: str, path: str, *, validate: bool = True) -> BandTable:
    """The bands of a file's ``text`` (shown as ``path`` in errors, with line and column)."""
    return BandTable(load_data_file(text, path, _SCHEMA, validate=validate))


@lru_cache(maxsize=1)
def bundled_bands() -> BandTable:
    """The bundled ``accuracy/bands.yaml``, read once (validated against its schema by the test suite)."""
    item = package_files("vramwise.accuracy").joinpath("bands.yaml")
    return read_bands(read_data_text(item, BANDS_PATH), BANDS_PATH, validate=False)


def band_for(profile: Any, method: str, strategy: str | None, load_in_4bit: bool = False,
             compile: bool = False, modelled: bool = True) -> ErrorBand:
    """The band of an estimate made with the compiled ``profile`` (a :class:`~vramwise.profiles.profile.Profile`);
    ``compile``: the step runs under torch.compile; ``modelled``: the profile models that compiled step
    (False: it estimates the eager run instead, which no band describes)."""
    if profile.file != f"formulas/{profile.name}/profile.yaml":
        reason = f"the profile is read from {profile.file}, not the bundled formulas"
    elif compile and not modelled:
        reason = ("torch.compile is not modelled for these settings: the figure is the eager run's "
                  "(see the estimate's warning)")
    else:
        return bundled_bands().band(profile.name, method, strategy, load_in_4bit=load_in_4bit, compile=compile)
    return ErrorBand(profile.name, "qlora" if method == "lora" and load_in_4bit else method, strategy or "none",
                     measured=False, compile=bool(compile), reason=reason)


# ---- device bands ------------------------------------------------------------------------------------

def _share(x: float, signed: bool = False) -> str:
    """A device error with one decimal: ``0.156`` -> ``15.6 %`` (``+15.6 %`` signed)."""
    return f"{100 * x:+.1f} %" if signed else f"{100 * x:.1f} %"


@dataclass(frozen=True)
class DeviceBand:
    """How far the device totals of one (profile, method) were from published GPU runs, or that no run covers it.

    Errors are fractions of the published figure (estimate / published - 1). ``p90_shortfall`` is the 90th
    percentile over the runs of max(0, 1 - estimate / published): a run the estimate fell short of by ``s``
    needs ``estimate / (1 - s)`` bytes, so an estimate that fits in a GPU's memory x (1 - p90_shortfall)
    covers nine runs in ten of these. ``frameworks`` and ``statistics`` count the runs by the framework (the
    stack) that published them and the statistic they report."""

    profile: str
    method: str
    covered: bool
    runs: int = 0
    median_abs_error: float | None = None
    p90_abs_error: float | None = None
    signed_median: float | None = None
    p90_shortfall: float | None = None
    frameworks: tuple = ()  # ((framework, runs), ...)
    statistics: tuple = ()  # ((statistic, runs), ...)
    reason: str | None = None  # why no run can cover it (None: the corpus has no device total of it)

    def line(self) -> str:
        """One line for a person: ``device total: median |error| 8.6 %, p90 15.6 % (signed median +8.5 %)
        over 32 published GPU runs (hf, lora: hf 24, fsdp-qlora 8)``, or ``device total: no published GPU run
        covers (...): why; keep a margin``."""
        if not self.covered:
            why = f": {self.reason}" if self.reason else ""
            return f"device total: no published GPU run covers ({self.profile}, {self.method}){why}; keep a margin"
        stacks = ", ".join(f"{name} {n}" for name, n in self.frameworks)
        return (f"device total: median |error| {_share(self.median_abs_error)}, p90 {_share(self.p90_abs_error)} "
                f"(signed median {_share(self.signed_median, True)}) over {self.runs} published GPU "
                f"run{'s' if self.runs != 1 else ''} ({self.profile}, {self.method}: {stacks})")

    def to_dict(self) -> dict:
        return {"covered": self.covered, "profile": self.profile, "method": self.method, "runs": self.runs,
                "median_abs_error": self.median_abs_error, "p90_abs_error": self.p90_abs_error,
                "signed_median": self.signed_median, "p90_shortfall": self.p90_shortfall,
                "frameworks": dict(self.frameworks), "statistics": dict(self.statistics), "reason": self.reason,
                "summary": self.line()}


@dataclass(frozen=True)
class ErrorBands:
    """The two bands of an estimate: ``tensors`` (CPU-measured tensor peaks) and ``device`` (published GPU runs)."""

    tensors: ErrorBand
    device: DeviceBand

    def lines(self) -> tuple:
        """The two lines for a person, tensors first."""
        return (self.tensors.line(), self.device.line())

    def to_dict(self) -> dict:
        return {"tensors": self.tensors.to_dict(), "device": self.device.to_dict()}


class DeviceBandTable:
    """The device bands of one file, checked: no (profile, method) twice, the p90 at least the median."""

    def __init__(self, df: DataFile):
        self.file = df
        self.statistics = tuple(df.data["statistics"])
        problems: list[str] = []
        self._bands: dict[tuple, DeviceBand] = {}
        for k, b in enumerate(df.data["bands"]):
            key = (b["profile"], b["method"])
            if key in self._bands:
                problems.append(df.problem(("bands", k), "/".join(key) + " is given twice"))
            if b["p90_abs_error"] < b["median_abs_error"]:
                problems.append(df.problem(("bands", k, "p90_abs_error"), "below the median"))
            for kind in ("frameworks", "statistics"):
                if sum(b[kind].values()) != b["runs"]:
                    problems.append(df.problem(("bands", k, kind), f"counts {sum(b[kind].values())} runs, not {b['runs']}"))
            self._bands[key] = DeviceBand(
                *key, covered=True, runs=b["runs"], median_abs_error=b["median_abs_error"],
                p90_abs_error=b["p90_abs_error"], signed_median=b["signed_median"], p90_shortfall=b["p90_shortfall"],
                frameworks=tuple(b["frameworks"].items()), statistics=tuple(b["statistics"].items()))
        if problems:
            raise FileFormatError(problems)

    def bands(self) -> tuple:
        """Every band, in file order."""
        return tuple(self._bands.values())

    def band(self, profile: str, method: str, *, load_in_4bit: bool = False) -> DeviceBand:
        """The band of ``profile`` x ``method`` (LoRA on a 4-bit base counts as qlora)."""
        if method == "lora" and load_in_4bit:
            method = "qlora"
        got = self._bands.get((profile, method))
        if got is not None:
            return got
        return DeviceBand(profile, method, covered=False)


def read_device_bands(text: str, path: str, *, validate: bool = True) -> DeviceBandTable:
    """The device bands of a file's ``text`` (shown as ``path`` in errors, with line and column)."""
    return DeviceBandTable(load_data_file(text, path, _DEVICE_SCHEMA, validate=validate))


@lru_cache(maxsize=1)
def bundled_device_bands() -> DeviceBandTable:
    """The bundled ``accuracy/device_bands.yaml``, read once (validated against its schema by the test suite)."""
    item = package_files("vramwise.accuracy").joinpath("device_bands.yaml")
    return read_device_bands(read_data_text(item, DEVICE_BANDS_PATH), DEVICE_BANDS_PATH, validate=False)


def device_band_for(profile: Any, method: str, load_in_4bit: bool = False) -> DeviceBand:
    """The device band of an estimate made with the compiled ``profile``; a profile read from another
    formulas folder is covered by no published run."""
    if profile.file != f"formulas/{profile.name}/profile.yaml":
        return DeviceBand(profile.name, "qlora" if method == "lora" and load_in_4bit else method, covered=False,
                          reason=f"the profile is read from {profile.file}, not the bundled formulas")
    return bundled_device_bands().band(profile.name, method, load_in_4bit=load_in_4bit)
