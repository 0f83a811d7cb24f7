"""Score vramwise's estimates against the corpus of published GPU memory figures (benchmarks/gpu_runs/*.yaml).

    python benchmarks/gpu_runs.py            # the summary table and the runs not scored
    python benchmarks/gpu_runs.py --list     # each run: id, published, estimated, error
    python benchmarks/gpu_runs.py --json     # the same as data (summary, runs, not scored)
    python benchmarks/gpu_runs.py --device-bands   # rewrite accuracy/device_bands.yaml from the scores

Offline and in seconds. Each run is read through vramwise's data-file reader, its model's config found in the
offline model catalog (``catalog/models.json``) or, failing that, in ``../shared/configs/<owner>__<name>.json``;
a model found in neither is not scored (never guessed from another model). The run is estimated with the
profile of its framework (``PROFILE_OF``) at its stated settings plus its ``from_defaults``, every other setting
at vramwise's default; ``fsdp-qlora`` runs on several GPUs take strategy ``fsdp`` and ``world_size`` = the GPU
count where they state neither, ``deepspeed`` runs take the ZeRO stage they state (a run that states none is not
scored).

What is compared:

- a memory statistic (``MEMORY_STATISTICS``) with one figure of the estimate (``FIGURE_OF``): the tensor peak
  (``figures["tensor_peak"]``) for torch's allocated and active peaks, the reserved figure for torch's reserved
  peak, the device figure for nvidia-smi, ``total`` for a figure of unstated reading; a profile without that
  figure is compared by its ``total``. All are one GPU's (the busiest rank under a strategy). A run on several
  GPUs without a strategy is compared with ``min_per_gpu(n)``. Units: GiB = 2**30, MiB = 2**20, GB = 10**9 and
  MB = 10**6 bytes, unless the run's notes say its GB / MB are GiB / MiB. Signed error = estimated / published - 1.
- ``largest_seq_len`` / ``largest_batch`` with ``vramwise.fit``'s largest sequence length / batch on that GPU (a
  catalog name, else the run's ``memory_gib``, else the one size its name gives, read as the GPU catalog reads
  sizes: "80 GB" is 80 x 10**9 bytes); ``fits`` / ``oom`` with fit's verdict (agree / disagree). fit runs
  with headroom 0: the boundary and the verdict score the memory model, not a margin kept on top of it.

Above the tensors (the summary's last table, ``pairs``): the runs whose source gives torch's allocated (or active)
peak and, for the same run, torch's reserved peak or nvidia-smi; the published gap between the two against the
estimate's gap between the same figures (the allocator's reserve, the CUDA context, NCCL's buffers).

The device bands (``--device-bands``, ``accuracy/device_bands.yaml``, read by ``vramwise.profiles.bands``):
the scored runs whose statistic is a device total (``DEVICE_STATISTICS``: torch's reserved peak, nvidia-smi, a
total of unstated reading), pooled by profile x method (every framework of the profile together; a framework's
runs count too for the other profiles that estimate its stack, ``ALSO_ESTIMATED_BY``), with the
number of runs, the median and p90 of |error|, the signed median and the p90 of the shortfall
max(0, -error), fit's default headroom. tests/unit/project/test_device_bands.py fails when the file is stale.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "benchmarks" / "gpu_runs"
SHARED_CONFIGS = ROOT.parent / "shared" / "configs"
SCHEMA = "gpu-runs-1.schema.json"

#: the profile each framework's runs are estimated with; a framework not here is not scored
PROFILE_OF = {"unsloth": "unsloth", "hf": "hf", "torchtune": "torchtune", "litgpt": "litgpt",
              "fsdp-qlora": "hf", "deepspeed": "hf"}
ZERO_STRATEGIES = ("zero1", "zero2", "zero3")
#: other profiles that estimate a framework's stack: scored on its runs for the device bands only (the tables
#: above score each run with ``PROFILE_OF``); studio is the reference estimator's answer for Unsloth's stack
ALSO_ESTIMATED_BY = {"unsloth": ("studio",)}

#: what a memory figure depends on most: a run that states none of them (nor the framework's defaults for them)
#: is not compared, as vramwise's own defaults for them are not the run's
SHAPE_SETTINGS = ("method", "batch_size", "seq_len")
MEMORY_STATISTICS = ("torch_max_allocated", "torch_max_reserved", "torch_peak_active", "nvidia_smi",
                     "total_reported")
BOUNDARY_STATISTICS = ("largest_seq_len", "largest_batch")
VERDICT_STATISTICS = ("fits", "oom")
#: the figure of the estimate each memory statistic is compared with (``total`` where the profile has no such figure)
FIGURE_OF = {"torch_max_allocated": "tensor_peak", "torch_max_reserved": "reserved",
             "torch_peak_active": "tensor_peak", "nvidia_smi": "device", "total_reported": "total"}
UNIT_BYTES = {"GiB": 2**30, "MiB": 2**20, "GB": 10**9, "MB": 10**6}
#: notes that say a decimal-looking unit is binary: "GB is GiB", "GB read as GiB", "MB here means MiB"
_BINARY_NOTE = {"GB": re.compile(r"\bGB\b[^.;]{0,30}?\b(?:is|are|means|read as)\s+(?:GiB|2\^30|2\*\*30)\b"),
                "MB": re.compile(r"\bMB\b[^.;]{0,30}?\b(?:is|are|means|read as)\s+(?:MiB|2\^20|2\*\*20)\b")}
_SIZE_IN_NAME = re.compile(r"(\d+(?:\.\d+)?)\s*(GB|GiB)\b")

DEFAULTS_NOTE = ("settings: each run's stated settings plus its from_defaults; every other setting is "
                 "vramwise's default")


class NotScored(Exception):
    """Why a run is not scored (one line)."""


@dataclass(frozen=True)
class Skipped:
    id: str
    framework: str
    model: str
    reason: str


@dataclass(frozen=True)
class Scored:
    """One scored run. ``published`` / ``estimated`` are bytes, tokens or sequences (a boundary; ``estimated``
    None when nothing fits), or bools (a verdict: the run fitted / fit says it fits)."""

    id: str
    framework: str
    profile: str
    method: str
    statistic: str
    published: Any
    estimated: Any
    compared_with: str  # the estimate's figure, fit's answer
    error: float | None  # estimated / published - 1 (memory and boundaries)
    agree: bool | None  # verdicts


# ---- reading ----------------------------------------------------------------------------------------

def load_file(path: Path) -> list[dict]:
    """The runs of one corpus file, read and validated by vramwise's data-file reader."""
    from vramwise.rules.datafiles import load_data_file, read_data_text

    shown = f"benchmarks/gpu_runs/{path.name}"
    return list(load_data_file(read_data_text(path, shown), shown, SCHEMA).data["runs"])


def load_runs(folder: Path = FOLDER) -> list[dict]:
    """Every run of the folder's ``*.yaml``, files in name order."""
    return [run for path in sorted(folder.glob("*.yaml")) for run in load_file(path)]


def unit_bytes(unit: str, notes: str = "") -> int:
    """Bytes in one ``unit``: GB and MB are decimal unless the notes say they are GiB / MiB."""
    if unit in _BINARY_NOTE and _BINARY_NOTE[unit].search(notes or ""):
        return UNIT_BYTES["GiB" if unit == "GB" else "MiB"]
    if unit not in UNIT_BYTES:
        raise NotScored(f"unit {unit!r} is not a memory size")
    return UNIT_BYTES[unit]


def published_bytes(run: dict) -> int:
    """A memory run's value in bytes."""
    return round(float(run["value"]) * unit_bytes(run["unit"], run.get("notes", "")))


def signed_error(estimated: float, published: float) -> float:
    """estimated / published - 1."""
    return estimated / published - 1


def shared_config(model: str, shared: Path | None = SHARED_CONFIGS) -> Path | None:
    """The shared config file of ``model`` (../shared/configs), or None where there is none."""
    if shared is None:
        return None
    path = shared / (model.replace("/", "__") + ".json")
    return path if path.is_file() else None


def find_config(model: str, shared: Path | None = SHARED_CONFIGS) -> str | None:
    """The model argument that reads ``model``'s config offline, or None: ``catalog:<id>`` when the catalog has
    that very id (or one of its names), else the shared config file."""
    from vramwise.inputs.catalog import find_model

    entry = find_model(model)
    if entry is not None and model.lower() in {n.lower() for n in (entry.id, *entry.aliases)}:
        return f"catalog:{entry.id}"
    path = shared_config(model, shared)
    return None if path is None else str(path)


def run_settings(run: dict) -> tuple[str, dict]:
    """The profile and settings a run is estimated with (raises NotScored)."""
    framework = run["framework"]
    if framework not in PROFILE_OF:
        raise NotScored(f"framework {framework!r} has no profile")
    if run["settings"].get("not_given"):
        # the run's own settings differ from what the source states and it does not give them: vramwise's
        # defaults in their place would test nothing (the same rule as SHAPE_SETTINGS)
        raise NotScored("settings the run ran with that the source does not give (settings.not_given)")
    settings = {**(run["settings"].get("from_defaults") or {}), **run["settings"]["stated"]}
    transformers = str((run.get("versions") or {}).get("transformers", ""))
    if transformers[:2] in ("2.", "3.", "4.") and "experts_layout" not in settings:
        # transformers before 5 builds one nn.Linear per expert, which bitsandbytes quantizes (the run's recorded
        # version; formulas/settings.yaml experts_layout); from 5 on the experts are fused 3-D parameters
        settings["experts_layout"] = "per_expert"
    count = (run.get("gpu") or {}).get("count", 1)
    if framework == "fsdp-qlora" and count > 1:
        settings.setdefault("strategy", "fsdp")
        settings.setdefault("world_size", count)
    if framework == "deepspeed" and settings.get("strategy") not in ZERO_STRATEGIES:
        raise NotScored("deepspeed run without a stated ZeRO stage")
    return PROFILE_OF[framework], settings


def gpu_query(run: dict) -> str:
    """What names the run's GPU to the GPU catalog (raises NotScored)."""
    from vramwise import gpu_spec
    from vramwise.errors import SettingsError

    gpu = run.get("gpu")
    if not gpu:
        raise NotScored("no GPU named")
    try:
        gpu_spec(gpu["name"])
        return gpu["name"]
    except SettingsError:
        pass
    if gpu.get("memory_gib"):
        return f"{gpu['memory_gib']}GiB"
    sizes = _SIZE_IN_NAME.findall(gpu["name"])
    if len(sizes) == 1:
        return "".join(sizes[0])
    raise NotScored(f"GPU {gpu['name']!r}: not in the GPU catalog and no single size in its name")


# ---- scoring ----------------------------------------------------------------------------------------

def _memory_figure(est, statistic: str, count: int) -> tuple[int, str]:
    if count > 1 and est.strategy in (None, "none"):
        return est.min_per_gpu(count), f"min_per_gpu({count})"
    name = FIGURE_OF[statistic]
    if name != "total" and name in est.figures:
        return est.figures[name], name
    return est.total, "total"


def score_run(run: dict, *, shared: Path | None = SHARED_CONFIGS, registry=None,
              profile: str | None = None) -> Scored | Skipped:
    """Score one run, or say why it is not scored; ``profile``: estimated with that profile instead of its
    framework's."""
    import vramwise
    from vramwise.errors import VramwiseError

    framework = run["framework"]
    try:
        model = find_config(run["model"], shared)
        if model is None:
            raise NotScored("no config offline")
        own, settings = run_settings(run)
        profile = profile or own
        statistic = run["statistic"]
        count = (run.get("gpu") or {}).get("count", 1)
        try:
            if statistic in MEMORY_STATISTICS:
                unstated = [k for k in SHAPE_SETTINGS if k not in settings]
                if unstated:  # vramwise's defaults are not the run's: the comparison would test nothing
                    raise NotScored(f"a memory figure whose {', '.join(unstated)} the source does not state")
                published = published_bytes(run)
                est = vramwise.estimate(model, profile=profile, registry=registry, **settings)
                estimated, figure = _memory_figure(est, statistic, count)
                return Scored(run["id"], framework, profile, est.settings.method, statistic, published, estimated,
                              figure, signed_error(estimated, published), None)
            if statistic in BOUNDARY_STATISTICS:
                # the largest sequence is measured at some batch, the largest batch at some length: the setting
                # the boundary is measured at must be the run's, as for a memory figure
                held = ("method", "batch_size") if statistic == "largest_seq_len" else ("method", "seq_len")
                unstated = [k for k in held if k not in settings]
                if unstated:
                    raise NotScored(f"a boundary whose {', '.join(unstated)} the source does not state")
            gpu = gpu_query(run)
            fit = vramwise.fit(model, gpu=gpu, gpus=count, headroom=0, profile=profile, registry=registry,
                               **settings)
            method = fit.to_dict()["settings"]["method"]
            if statistic in BOUNDARY_STATISTICS:
                seq = statistic == "largest_seq_len"
                # the sequence memory alone allows: a published boundary is a memory boundary (several run past
                # the config's context window with rope scaling), and fit's capped figure would score the cap
                estimated = fit.max_seq_len_memory if seq else fit.max_batch_size
                error = None if estimated is None else signed_error(estimated, run["value"])
                return Scored(run["id"], framework, profile, method, statistic, run["value"], estimated,
                              "fit.max_seq_len_memory" if seq else "fit.max_batch_size", error, None)
            if statistic in VERDICT_STATISTICS:
                fitted = bool(run["value"]) if statistic == "fits" else not run["value"]
                return Scored(run["id"], framework, profile, method, statistic, fitted, bool(fit.fits),
                              "fit.fits", None, fitted == bool(fit.fits))
            raise NotScored(f"statistic {statistic!r} is not scored")
        except VramwiseError as e:
            raise NotScored(f"refused: {str(e).splitlines()[0]}") from None
    except NotScored as e:
        return Skipped(run["id"], framework, run["model"], str(e))


def score_runs(runs: Iterable[dict], *, shared: Path | None = SHARED_CONFIGS, registry=None) -> list:
    """Each run scored or skipped, in the runs' order."""
    return [score_run(r, shared=shared, registry=registry) for r in runs]


def p90(values: list[float]) -> float:
    """The 90th percentile by nearest rank: the ceil(0.9 n)-th smallest value."""
    ordered = sorted(values)
    return ordered[math.ceil(0.9 * len(ordered)) - 1]


def summarise(results: Iterable) -> dict:
    """Groups profile x framework x method x statistic (with the figure compared), and the runs not scored."""
    groups: dict[tuple, list[Scored]] = {}
    skipped = []
    for r in results:
        if isinstance(r, Skipped):
            skipped.append(r)
        else:
            groups.setdefault((r.profile, r.framework, r.method, r.statistic, r.compared_with), []).append(r)
    memory, boundaries, verdicts = [], [], []
    for (profile, framework, method, statistic, figure), rows in sorted(groups.items()):
        head = {"profile": profile, "framework": framework, "method": method, "statistic": statistic,
                "compared_with": figure, "runs": len(rows)}
        if statistic in VERDICT_STATISTICS:
            agree = sum(r.agree for r in rows)
            verdicts.append({**head, "agree": agree, "share_agree": agree / len(rows)})
            continue
        errors = [r.error for r in rows if r.error is not None]
        stats = {"none_fits": len(rows) - len(errors),
                 "median_abs_error": statistics.median(abs(e) for e in errors) if errors else None,
                 "p90_abs_error": p90([abs(e) for e in errors]) if errors else None,
                 "signed_median_error": statistics.median(errors) if errors else None}
        (memory if statistic in MEMORY_STATISTICS else boundaries).append({**head, **stats})
    reasons: dict[str, dict[str, int]] = {}
    for s in skipped:
        models = reasons.setdefault(s.reason, {})
        models[s.model] = models.get(s.model, 0) + 1
    scored = sum(len(v) for v in groups.values())
    return {"runs": scored + len(skipped), "scored": scored, "settings": DEFAULTS_NOTE,
            "memory": memory, "boundaries": boundaries, "verdicts": verdicts,
            "not_scored": [asdict(s) for s in skipped],
            "not_scored_reasons": {reason: dict(sorted(models.items(), key=lambda kv: (-kv[1], kv[0])))
                                   for reason, models in sorted(reasons.items(),
                                                                key=lambda kv: (-sum(kv[1].values()), kv[0]))}}


#: the readings of a run that have a tensor peak beside them in the same source: what the device adds above it
ALLOCATED_STATISTICS = ("torch_max_allocated", "torch_peak_active")
ABOVE_STATISTICS = ("torch_max_reserved", "nvidia_smi")


def _same_run(run: dict) -> str:
    """What two readings of one run share: source, model, GPU and settings."""
    return json.dumps([run["source"]["url"], run["model"], run.get("gpu"), run["settings"]], sort_keys=True)


def pairs(runs: list[dict], results: list) -> list[dict]:
    """Runs whose source gives both a tensor peak (torch's allocated or active peak) and a reading above it
    (torch's reserved peak, nvidia-smi), both scored: the published gap (reading - peak) and the estimate's
    (its figure for the reading - its tensor peak), in bytes, by reading and by GPUs (one / several)."""
    scored = {r.id: r for r in results if isinstance(r, Scored)}
    peaks = {}
    for run in runs:
        if run["statistic"] in ALLOCATED_STATISTICS and run["id"] in scored:
            peaks[_same_run(run)] = scored[run["id"]]
    out = []
    for run in runs:
        peak = peaks.get(_same_run(run))
        above = scored.get(run["id"])
        if run["statistic"] not in ABOVE_STATISTICS or peak is None or above is None:
            continue
        count = (run.get("gpu") or {}).get("count", 1)
        out.append({"id": run["id"], "profile": above.profile, "statistic": run["statistic"], "gpus": count,
                    "published_peak": peak.published, "published_gap": above.published - peak.published,
                    "estimated_gap": above.estimated - peak.estimated})
    return out


def summarise_pairs(rows: list[dict]) -> list[dict]:
    """:func:`pairs` by profile x reading x one / several GPUs: medians of the published gap, of the gap over the
    published peak, of the estimate's gap, and of the estimate's gap less the published one (GiB)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["profile"], r["statistic"], "1" if r["gpus"] == 1 else "2+"), []).append(r)
    out = []
    for (profile, statistic, gpus), g in sorted(groups.items()):
        diff = [(r["estimated_gap"] - r["published_gap"]) / 2**30 for r in g]
        out.append({"profile": profile, "statistic": statistic, "gpus": gpus, "pairs": len(g),
                    "published_gap_gib": statistics.median(r["published_gap"] / 2**30 for r in g),
                    "published_gap_share": statistics.median(r["published_gap"] / r["published_peak"] for r in g),
                    "estimated_gap_gib": statistics.median(r["estimated_gap"] / 2**30 for r in g),
                    "shortfall_gib": statistics.median(diff),
                    "shortfall_min_gib": min(diff), "shortfall_max_gib": max(diff)})
    return out


DEVICE_BANDS = ROOT / "accuracy" / "device_bands.yaml"


def device_band_results(runs: list[dict], results: list, *, shared: Path | None = SHARED_CONFIGS,
                        registry=None) -> list:
    """The scores the device bands pool: ``results`` (each run with its framework's profile) and each run of a
    framework in ``ALSO_ESTIMATED_BY`` scored again with those profiles."""
    from vramwise.profiles.bands import DEVICE_STATISTICS

    extra = [score_run(r, shared=shared, registry=registry, profile=p) for r in runs
             if r["statistic"] in DEVICE_STATISTICS for p in ALSO_ESTIMATED_BY.get(r["framework"], ())]
    return [*results, *extra]


def device_bands(results: Iterable) -> list[dict]:
    """The device bands of scored runs: one entry per (profile, method) with a run whose statistic is a device
    total, in that order."""
    from vramwise.profiles.bands import DEVICE_STATISTICS

    groups: dict[tuple, list[Scored]] = {}
    for r in results:
        if isinstance(r, Scored) and r.statistic in DEVICE_STATISTICS:
            groups.setdefault((r.profile, r.method), []).append(r)
    out = []
    for (profile, method), rows in sorted(groups.items()):
        errors = [r.error for r in rows]
        frameworks: dict[str, int] = {}
        stats: dict[str, int] = {}
        for r in rows:
            frameworks[r.framework] = frameworks.get(r.framework, 0) + 1
            stats[r.statistic] = stats.get(r.statistic, 0) + 1
        out.append({"profile": profile, "method": method, "runs": len(rows),
                    "median_abs_error": round(statistics.median(abs(e) for e in errors), 6),
                    "p90_abs_error": round(p90([abs(e) for e in errors]), 6),
                    "signed_median": round(statistics.median(errors), 6),
                    "p90_shortfall": round(p90([max(0.0, -e) for e in errors]), 6),
                    "frameworks": dict(sorted(frameworks.items(), key=lambda kv: (-kv[1], kv[0]))),
                    "statistics": dict(sorted(stats.items(), key=lambda kv: (-kv[1], kv[0])))})
    return out


def render_device_bands(bands: list[dict]) -> str:
    """The text of accuracy/device_bands.yaml."""
    from vramwise.profiles.bands import DEVICE_STATISTICS

    def mapping(d: dict) -> str:
        return "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}"

    lines = ["# How far vramwise's device totals are from published GPU runs, by profile x method.",
             "#",
             "# Written by `python benchmarks/gpu_runs.py --device-bands` from the corpus benchmarks/gpu_runs/*.yaml",
             "# scored against the estimates (docs/gpu-runs.md): error = estimate / published - 1 of the runs whose",
             "# statistic is a device total. Do not edit by hand; tests/unit/project/test_device_bands.py fails when",
             "# it is stale. Schema: schemas/device-bands-1.schema.json; what the figures mean: docs/error-bands.md.",
             "schema_version: 1",
             f"statistics: [{', '.join(DEVICE_STATISTICS)}]",
             "bands:" + ("" if bands else " []")]
    for b in bands:
        lines += [f"  - profile: {b['profile']}", f"    method: {b['method']}", f"    runs: {b['runs']}"]
        lines += [f"    {k}: {b[k]:.6f}" for k in ("median_abs_error", "p90_abs_error", "signed_median", "p90_shortfall")]
        lines += [f"    frameworks: {mapping(b['frameworks'])}", f"    statistics: {mapping(b['statistics'])}"]
    return "\n".join(lines) + "\n"


# ---- printing ---------------------------------------------------------------------------------------

def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Text columns left-aligned (the first four), figures right-aligned."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]

    def line(cells: list) -> str:
        return "  ".join(str(c).ljust(w) if i < 4 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def format_summary(summary: dict) -> str:
    """The tables of :func:`summarise` as text."""
    out = [f"{summary['runs']} runs, {summary['scored']} scored; {summary['settings']}.",
           "error = estimated / published - 1; GB = 10^9 bytes, MB = 10^6 unless a run's notes say GiB / MiB.",
           "", "Memory (one GPU; compared with: the estimate's figure)"]
    out += _table(["profile", "framework", "method", "statistic / compared with", "runs", "med|err|",
                   "p90|err|", "signed med"],
                  [[g["profile"], g["framework"], g["method"], f"{g['statistic']} / {g['compared_with']}",
                    g["runs"], _pct(g["median_abs_error"]), _pct(g["p90_abs_error"]),
                    _pct(g["signed_median_error"], True)] for g in summary["memory"]])
    out += ["", "Boundaries (fit's largest on the run's GPU; 'none' = fit finds nothing that fits)"]
    out += _table(["profile", "framework", "method", "statistic", "runs", "none", "med|err|", "p90|err|",
                   "signed med"],
                  [[g["profile"], g["framework"], g["method"], g["statistic"], g["runs"], g["none_fits"],
                    _pct(g["median_abs_error"]), _pct(g["p90_abs_error"]), _pct(g["signed_median_error"], True)]
                   for g in summary["boundaries"]])
    out += ["", "Fits / out of memory (fit's verdict)"]
    out += _table(["profile", "framework", "method", "statistic", "runs", "agree", "share"],
                  [[g["profile"], g["framework"], g["method"], g["statistic"], g["runs"], g["agree"],
                    _pct(g["share_agree"])] for g in summary["verdicts"]])
    if summary.get("pairs"):
        out += ["", "Above the tensors (runs that give a tensor peak and a reading above it; GiB, medians;"
                " estimate - published: median [least, most])"]
        out += _table(["profile", "reading", "GPUs", "pairs", "published gap", "of the peak", "estimated gap",
                       "estimate - published"],
                      [[g["profile"], g["statistic"], g["gpus"], g["pairs"], f"{g['published_gap_gib']:.2f}",
                        _pct(g["published_gap_share"]), f"{g['estimated_gap_gib']:.2f}",
                        f"{g['shortfall_gib']:+.2f} [{g['shortfall_min_gib']:+.2f}, {g['shortfall_max_gib']:+.2f}]"]
                       for g in summary["pairs"]])
    out += ["", f"Not scored: {len(summary['not_scored'])} runs"]
    for reason, models in summary["not_scored_reasons"].items():
        out.append(f"  {sum(models.values()):>3}  {reason}")
        out += textwrap.wrap(", ".join(f"{m} x{n}" for m, n in models.items()), 100,
                             initial_indent=" " * 7, subsequent_indent=" " * 7, break_on_hyphens=False)
    return "\n".join(out)


def _shown(value: Any, statistic: str) -> str:
    if isinstance(value, bool):
        return "fits" if value else "oom"
    if value is None:
        return "none"
    if statistic in MEMORY_STATISTICS:
        return f"{value / 2**30:.2f} GiB"
    return str(value)


def format_list(results: Iterable) -> str:
    """One line a run: id, published, estimated (the figure it is), error or agreement; or why not scored."""
    lines = []
    for r in results:
        if isinstance(r, Skipped):
            lines.append(f"{r.id}  not scored: {r.reason}")
        else:
            tail = (("agree" if r.agree else "disagree") if r.agree is not None else _pct(r.error, True))
            lines.append(f"{r.id}  {r.profile} {r.statistic}: published {_shown(r.published, r.statistic)}, "
                         f"estimated {_shown(r.estimated, r.statistic)} ({r.compared_with}), {tail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_runs.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="the summary, every run and the runs not scored as JSON")
    parser.add_argument("--list", action="store_true", help="each run: id, published, estimated, error")
    parser.add_argument("--device-bands", action="store_true",
                        help=f"rewrite {DEVICE_BANDS.relative_to(ROOT)} (fit's default headroom) from the scores")
    args = parser.parse_args(argv)
    runs = load_runs()
    results = score_runs(runs)
    if args.device_bands:
        bands = device_bands(device_band_results(runs, results))
        DEVICE_BANDS.write_text(render_device_bands(bands), encoding="utf-8")
        print(f"wrote {DEVICE_BANDS.relative_to(ROOT)}")
    elif args.list and not args.json:
        print(format_list(results))
    else:
        summary = summarise(results)
        summary["pairs"] = summarise_pairs(pairs(runs, results))
        if args.json:
            summary["scored_runs"] = [asdict(r) for r in results if isinstance(r, Scored)]
            print(json.dumps(summary, indent=1))
        else:
            print(format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
