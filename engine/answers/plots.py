"""Pictures of the answers: a stacked bar of an estimate's components, stacked bars side by side
for a comparison, the frontier of a fit, a heatmap (or bars) for a sweep.

Every function writes a PNG or an SVG, chosen by the path's suffix, and returns the data it drew
as plain Python (GiB as floats, ``None`` where nothing was drawn), so a test can compare what was
plotted with the result's ``to_dict()`` instead of pixels.

matplotlib is an optional extra (``pip install 'vramwise[plot]'``) and is imported only when a
picture is drawn: ``import vramwise`` never imports it. The figures are drawn with matplotlib's
object API on an Agg canvas, never through ``pyplot``: no display is opened, the user's pyplot
backend and open figures are left alone, and nothing is kept once the file is written.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence

from vramwise.errors import MissingDependencyError, SettingsError
from vramwise.estimation.estimate import COMPONENTS
from vramwise.profiles.settings import ADAPTER_METHODS

__all__ = ["plot_estimate", "plot_compare", "plot_fit", "plot_sweep", "PLOT_FORMATS"]

GIB = 2**30
#: Suffixes a plot path may have, and the format each one writes.
PLOT_FORMATS = {".png": "png", ".svg": "svg"}
MISSING = "plots need matplotlib: pip install 'vramwise[plot]'"

# One fixed colour per component (colour-blind friendly, from the Okabe-Ito palette).
COLORS = {
    "weights": "#0072B2",
    "lora": "#E69F00",
    "optimizer": "#009E73",
    "gradients": "#D55E00",
    "activations": "#CC79A7",
    "overhead": "#999999",
}
_FITS_COLOR, _NOFIT_COLOR = "#1a7f37", "#c62828"


# -- plumbing ---------------------------------------------------------------------------------
def _format(path: Any) -> tuple[Path, str]:
    if not isinstance(path, (str, os.PathLike)):
        raise SettingsError(f"a plot path must be a file name ending in .png or .svg, got {type(path).__name__}")
    p = Path(path)
    fmt = PLOT_FORMATS.get(p.suffix.lower())
    if fmt is None:
        raise SettingsError(f"plot file {str(p)!r} must end in .png or .svg (got {p.suffix or 'no suffix'!r})")
    return p, fmt


def _matplotlib():
    """The modules a plot needs, imported now; a one-line MissingDependencyError (extra ``plot``) when
    matplotlib is missing."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError(MISSING, extra="plot") from None
    return matplotlib, Figure, FigureCanvasAgg


class _Canvas:
    """A figure on an Agg canvas (no pyplot, no display) with fixed style; writes and releases it."""

    def __init__(self, path: Any, width: float, height: float):
        self.path, self.fmt = _format(path)
        self.mpl, Figure, FigureCanvasAgg = _matplotlib()
        self.rc = self.mpl.rc_context({
            "svg.fonttype": "none",       # text stays <text> in an SVG: small, searchable
            "svg.hashsalt": "vramwise",   # the same picture gives the same SVG
            "font.size": 10,
            "axes.titlesize": 12,
            "axes.spines.top": False,
            "axes.spines.right": False,
        })
        self.rc.__enter__()
        try:
            self.fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
            FigureCanvasAgg(self.fig)
        except BaseException:
            self.rc.__exit__(None, None, None)
            raise

    def __enter__(self):
        return self.fig

    def __exit__(self, kind, exc, tb):
        try:
            if kind is None:
                metadata = {"Date": None} if self.fmt == "svg" else None
                try:
                    self.fig.savefig(self.path, format=self.fmt, dpi=120, metadata=metadata)
                except OSError as err:
                    raise SettingsError(f"cannot write plot {str(self.path)!r}: {err.strerror or err}") from None
        finally:
            self.fig.clear()  # nothing registers the figure anywhere: clearing it releases it
            self.fig = None
            self.rc.__exit__(None, None, None)
        return False


def _gib(n: int | None) -> float | None:
    return None if n is None else n / GIB


def _fmt_gib(v: float) -> str:
    return f"{v:,.2f}" if v < 1000 else f"{v:,.0f}"


def _settings_line(settings: dict, keys=("method", "batch_size", "seq_len", "lora_rank")) -> str:
    short = {"batch_size": "batch", "seq_len": "seq", "lora_rank": "rank"}
    method = settings.get("method")
    parts = []
    for k in keys:
        if k not in settings or settings[k] is None:
            continue
        if k == "lora_rank" and method not in ADAPTER_METHODS:
            continue
        v = settings[k]
        parts.append(f"{v}" if k == "method" else f"{short.get(k, k)} {v:,}" if isinstance(v, int) else f"{short.get(k, k)} {v}")
    return ", ".join(parts)


def _model_name(est) -> str:
    source = getattr(est.model, "source", "") or ""
    name = Path(source).name if source.endswith(".json") else source
    if name == "config.json":
        name = Path(source).parent.name or source
    return name or est.family


def _stacked(ax, labels: Sequence[str], estimates: Sequence, *, width: float = 0.6) -> dict:
    """Stacked bars of the components, one bar per estimate (None: no bar, marked n/a); totals on top."""
    series = {c: [None if e is None else getattr(e, c) / GIB for e in estimates] for c in COMPONENTS}
    totals = [None if e is None else e.total / GIB for e in estimates]
    x = list(range(len(estimates)))
    top = max([t for t in totals if t is not None] + [sum(series[c][i] or 0 for c in COMPONENTS)
                                                        for i in x] + [0.0]) or 1.0
    bottoms = [0.0] * len(x)
    for c in COMPONENTS:
        heights = [series[c][i] or 0.0 for i in x]
        for i in x:
            if estimates[i] is None:
                continue
            (rect,) = ax.bar([i], [heights[i]], width, bottom=[bottoms[i]], color=COLORS[c],
                             edgecolor="white", linewidth=0.6, label=c if i == _first(estimates) else None)
            rect.set_gid(f"bar-{c}-{i}")
            # the value inside its segment when the segment is tall enough to hold the text
            if heights[i] >= 0.07 * top:
                ax.text(i, bottoms[i] + heights[i] / 2, _fmt_gib(heights[i]), ha="center", va="center",
                        fontsize=8, color="white" if c not in ("lora", "overhead") else "black")
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for i in x:
        if totals[i] is None:
            ax.text(i, 0.02 * top, "n/a", ha="center", va="bottom", fontsize=9, color="#555555")
        else:
            ax.annotate(f"{_fmt_gib(totals[i])} GiB", (i, max(totals[i], bottoms[i])), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=9, fontweight="bold")
    ax.set_xticks(x, labels)
    ax.tick_params(axis="x", length=0)
    ax.set_xlim(-0.6, len(x) - 0.4)
    ax.set_ylim(0, top * 1.12)
    ax.set_ylabel("memory (GiB = 2^30 bytes)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    return {"series": series, "totals": totals}


def _first(estimates) -> int:
    return next((i for i, e in enumerate(estimates) if e is not None), -1)


def _legend_right(ax, **kw):
    """A legend outside the axes, to the right: it never covers a bar."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        # stacked bars are drawn bottom-up: list the legend top-down, as the eye reads the bar
        ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, **kw)


# -- the four pictures ------------------------------------------------------------------------
def plot_estimate(est, path) -> dict:
    """A stacked bar of one :class:`~vramwise.Estimate`'s components in GiB, the total on top and
    each component's GiB and share in the legend. Returns ``{"labels", "series", "totals", "unit"}``
    (``series[c] == [est.c / 2**30]``)."""
    label = f"{est.profile}\n{est.settings.method}"
    with _Canvas(path, 6.4, 4.8) as fig:
        ax = fig.add_subplot()
        data = _stacked(ax, [label], [est], width=0.5)
        ax.set_xlim(-0.8, 0.8)
        total = est.total
        handles, _ = ax.get_legend_handles_labels()
        names = [f"{c}  {_fmt_gib(getattr(est, c) / GIB)} GiB ({100 * getattr(est, c) / total:.1f}%)"
                 for c in COMPONENTS]
        ax.legend(handles[::-1], names[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
                  title="component", alignment="left")
        fig.suptitle(f"{_model_name(est)}: {_fmt_gib(total / GIB)} GiB\n"
                     f"{est.family} ({est.profile} profile); {_settings_line(est.settings.to_dict())}", fontsize=11)
    return {"labels": [label.replace("\n", " ")], **data, "unit": "GiB"}


def plot_compare(comparison, path) -> dict:
    """Stacked bars, one per (profile, method) cell of a :class:`~vramwise.Comparison`, each with its
    total (and, with a GPU, whether it fits); the GPU's memory as a horizontal line. A cell that
    could not be estimated has no bar and is marked n/a. Returns ``{"labels", "profiles", "methods",
    "series", "totals", "fits", "problems", "gpu", "unit"}`` (``None`` where a cell has no estimate)."""
    cells = list(comparison.cells)
    if not cells:
        raise SettingsError("nothing to plot: the comparison has no cells")
    profiles = [c[0] for c in cells]
    methods = [c[1] for c in cells]
    several_profiles = len(set(profiles)) > 1
    labels = [f"{m}\n{p}" if several_profiles else m for p, m in zip(profiles, methods)]
    estimates = [c[2] for c in cells]
    gpu = comparison.gpu
    gpu_gib = _gib(gpu.memory_bytes) if gpu is not None else None
    with _Canvas(path, max(7.2, 1.0 * len(cells) + 4.0), 5.0) as fig:
        ax = fig.add_subplot()
        data = _stacked(ax, labels, estimates)
        top = ax.get_ylim()[1]
        if gpu is not None:
            if gpu_gib * 1.08 > top:
                ax.set_ylim(0, gpu_gib * 1.12)
            per = " per GPU" if gpu.count > 1 else ""
            line = ax.axhline(gpu_gib, color="black", linestyle="--", linewidth=1.2,
                              label=f"{gpu.name}\n{_fmt_gib(gpu_gib)} GiB{per}")
            line.set_gid("gpu-line")
            for i, (*_, fits) in enumerate(cells):
                total = data["totals"][i]
                if fits is not None and total is not None:  # above the total's label
                    ax.annotate("fits" if fits else "does not fit", (i, total), xytext=(0, 15),
                                textcoords="offset points", ha="center", va="bottom", fontsize=8,
                                color=_FITS_COLOR if fits else _NOFIT_COLOR, fontweight="bold",
                                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8})
            ax.set_ylim(0, ax.get_ylim()[1] * 1.06)
        _legend_right(ax)
        profs = ", ".join(dict.fromkeys(profiles))
        title = f"{_model_name(next(e for e in estimates if e is not None)) if any(estimates) else 'comparison'}"
        first = next((e for e in estimates if e is not None), None)
        sub = _settings_line(first.settings.to_dict(), ("batch_size", "seq_len", "lora_rank")) if first else ""
        where = f" on {gpu.count} x {gpu.name}" if gpu is not None and gpu.count > 1 else (
            f" on {gpu.name}" if gpu is not None else "")
        by = "method and profile" if several_profiles else "method"
        fig.suptitle(f"{title}: memory by {by}{where}\nprofile {profs}; {sub}", fontsize=11)
    return {
        "labels": [label.replace("\n", " ") for label in labels],
        "profiles": profiles,
        "methods": methods,
        **data,
        "fits": [c[4] for c in cells],
        "problems": [c[3] for c in cells],
        "gpu": None if gpu is None else {"name": gpu.name, "memory_gib": gpu_gib, "count": gpu.count},
        "unit": "GiB",
    }


def plot_fit(fit, path) -> dict:
    """The frontier of a :class:`~vramwise.Fit`: the largest batch that fits at each sequence length
    (log axes), sequence lengths where batch 1 does not fit marked on the bottom, the given settings
    as a star, and the GPU's usable memory in the title. Returns ``{"seq_len", "max_batch_size",
    "gpu", "gpus", "usable_gib", "headroom", "xscale", "yscale"}`` (``None`` where nothing fits)."""
    seqs = [s for s, _ in fit.frontier]
    batches = [b for _, b in fit.frontier]
    usable = fit.usable_bytes / GIB
    if not seqs:
        raise SettingsError("nothing to plot: the fit has no frontier (give at least one sequence length)")
    ok = [(s, b) for s, b in fit.frontier if b is not None]
    bad = [s for s, b in fit.frontier if b is None]
    yscale = "log" if ok and max(b for _, b in ok) >= 10 * min(b for _, b in ok) else "linear"
    settings = dict(fit.settings)
    with _Canvas(path, 7.6, 5.0) as fig:
        ax = fig.add_subplot()
        ax.set_xscale("log", base=2)
        if yscale == "log":
            ax.set_yscale("log", base=2)
        if ok:
            (line,) = ax.plot([s for s, _ in ok], [b for _, b in ok], marker="o", color=COLORS["weights"],
                              linewidth=2, label="largest batch that fits")
            line.set_gid("frontier")
            for s, b in ok:
                ax.annotate(f"{b:,}", (s, b), xytext=(0, 6), textcoords="offset points", ha="center",
                            fontsize=8, color="#333333")
        if bad:  # along the bottom of the axes, whatever the y scale
            (marks,) = ax.plot(bad, [0.04] * len(bad), linestyle="none", marker="x", color=_NOFIT_COLOR,
                               markersize=8, markeredgewidth=2, label="batch 1 does not fit",
                               transform=ax.get_xaxis_transform(), clip_on=False)
            marks.set_gid("does-not-fit")
        s0, b0 = settings.get("seq_len"), settings.get("batch_size")
        if isinstance(s0, int) and isinstance(b0, int):
            star = ax.plot([s0], [b0], linestyle="none", marker="*", markersize=14,
                           color=_FITS_COLOR if fit.fits else _NOFIT_COLOR,
                           label=f"your settings (batch {b0:,}, seq {s0:,}): {'fits' if fit.fits else 'does not fit'}")
            star[0].set_gid("settings")
        ax.set_xticks(seqs, [_tokens(s) for s in seqs], rotation=45 if len(seqs) > 8 else 0)
        ax.minorticks_off()
        if yscale == "log":
            shown = [b for _, b in ok] + ([b0] if isinstance(b0, int) else [])
            lo, hi = min(shown), max(shown)
            ticks = [2**k for k in range(int(math.log2(lo)), int(math.log2(hi)) + 2)]
            if len(ticks) > 12:  # at most about a dozen labels: every 2nd, 4th ... power of two
                step = math.ceil(len(ticks) / 12)
                ticks = ticks[::step]
            ax.set_yticks(ticks, [f"{t:,}" for t in ticks])
            ax.set_ylim(lo / 2.2, hi * 2.2)
        else:
            from matplotlib.ticker import MaxNLocator

            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(bottom=0)
        if not ok:
            ax.text(0.5, 0.5, "batch 1 does not fit at any of these sequence lengths", transform=ax.transAxes,
                    ha="center", va="center", fontsize=11, color=_NOFIT_COLOR)
        ax.set_xlabel("sequence length (tokens, log scale)")
        ax.set_ylabel("largest batch size that fits" + (" (log scale)" if yscale == "log" else ""))
        ax.grid(alpha=0.3)
        ax.set_axisbelow(True)
        ax.legend(loc="upper right", fontsize=9, framealpha=0.9)
        gpus = f"{fit.gpus} x {fit.gpu.name}" if fit.gpus > 1 else fit.gpu.name
        head = f", {fit.headroom:.0%} kept free" if fit.headroom else ""
        ax.set_title(f"Largest batch on {gpus}: {_fmt_gib(usable)} GiB usable per GPU{head}\n"
                     f"{_model_name(fit.estimate) + ', ' if fit.estimate is not None else ''}"
                     f"profile {fit.profile}; {_settings_line(settings, ('method', 'lora_rank'))}", fontsize=11)
    return {
        "seq_len": seqs,
        "max_batch_size": batches,
        "gpu": fit.gpu.name,
        "gpus": fit.gpus,
        "usable_gib": usable,
        "headroom": fit.headroom,
        "xscale": "log",
        "yscale": yscale,
    }


def _tokens(n: int) -> str:
    for unit, size in (("M", 2**20), ("K", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n:,}"


def plot_sweep(sweep, path) -> dict:
    """A :class:`~vramwise.Sweep`'s totals: over two axes a heatmap in GiB (first axis down, second
    across, each cell labelled); over one axis (or none) stacked bars of the components per value.
    More than two axes is a SettingsError. Returns, for two axes, ``{"kind": "heatmap", "x", "y",
    "totals"}`` with ``totals[i][j]`` the GiB at ``y.values[i]``, ``x.values[j]``; for one,
    ``{"kind": "bars", "axis", "values", "series", "totals"}``."""
    axes = list(sweep.axes)
    if len(axes) > 2:
        names = ", ".join(a for a, _ in axes)
        raise SettingsError(f"a sweep plot shows at most two axes and this sweep varies {len(axes)} ({names}): "
                            "plot at most two axes")
    if len(axes) == 2:
        return _heatmap(sweep, axes, path)
    return _sweep_bars(sweep, axes, path)


def _value_label(v) -> str:
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def _heatmap(sweep, axes, path) -> dict:
    (yname, yvals), (xname, xvals) = axes
    yvals, xvals = list(yvals), list(xvals)
    by = {tuple(vals): e for vals, e in sweep.rows}
    totals = [[(by[(y, x)].total / GIB if (y, x) in by else None) for x in xvals] for y in yvals]
    flat = [v for row in totals for v in row if v is not None]
    first = sweep.rows[0][1] if sweep.rows else None
    ny, nx = len(yvals), len(xvals)
    with _Canvas(path, min(16.0, max(6.4, 0.9 * nx + 3.2)), min(12.0, max(4.8, 0.5 * ny + 2.4))) as fig:
        ax = fig.add_subplot()
        grid = [[math.nan if v is None else v for v in row] for row in totals]
        image = ax.imshow(grid, cmap="viridis", aspect="auto", origin="lower", interpolation="nearest")
        image.set_gid("heatmap")
        bar = fig.colorbar(image, ax=ax, pad=0.02)
        bar.set_label("total memory (GiB)")
        if nx * ny <= 400 and flat:
            lo, hi = min(flat), max(flat)
            for i, row in enumerate(totals):
                for j, v in enumerate(row):
                    if v is None:
                        continue
                    light = hi > lo and (v - lo) / (hi - lo) > 0.6  # viridis turns yellow at the top
                    ax.text(j, i, _fmt_gib(v), ha="center", va="center", fontsize=8 if nx <= 10 else 6,
                            color="black" if light else "white")
        ax.set_xticks(range(nx), [_value_label(v) for v in xvals], rotation=45 if nx > 8 else 0)
        ax.set_yticks(range(ny), [_value_label(v) for v in yvals])
        ax.set_xlabel(xname)
        ax.set_ylabel(yname)
        ax.spines[:].set_visible(False)
        fixed = {k: v for k, v in first.settings.to_dict().items() if k not in (xname, yname)} if first else {}
        ax.set_title(f"{_model_name(first) if first else 'sweep'}: total memory (GiB) by {yname} and {xname}\n"
                     f"profile {first.profile if first else '?'}; {_settings_line(fixed)}", fontsize=11)
    return {
        "kind": "heatmap",
        "x": {"name": xname, "values": xvals},
        "y": {"name": yname, "values": yvals},
        "totals": totals,
        "unit": "GiB",
    }


def _sweep_bars(sweep, axes, path) -> dict:
    name = axes[0][0] if axes else ""
    values = [vals[0] for vals, _ in sweep.rows] if axes else []
    estimates = [e for _, e in sweep.rows]
    labels = [_value_label(v) for v in values] if axes else ["total"]
    if not estimates:
        raise SettingsError("nothing to plot: the sweep has no rows")
    with _Canvas(path, max(6.4, 0.8 * len(estimates) + 3.6), 5.0) as fig:
        ax = fig.add_subplot()
        data = _stacked(ax, labels, estimates)
        if len(labels) > 10:
            ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel(name or "all settings fixed")
        _legend_right(ax, title="component")
        first = estimates[0]
        fixed = {k: v for k, v in first.settings.to_dict().items() if k != name}
        fig.suptitle(f"{_model_name(first)}: memory by {name or 'settings'}\n"
                     f"profile {first.profile}; {_settings_line(fixed)}", fontsize=11)
    return {"kind": "bars", "axis": name, "values": values, "labels": labels, **data, "unit": "GiB"}
