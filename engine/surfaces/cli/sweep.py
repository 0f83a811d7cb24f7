"""``vramwise sweep``: totals over a grid of settings, as a table, CSV or JSON."""

from __future__ import annotations

import csv
import sys

from vramwise.answers.fit import SWEEPABLE, sweep
from vramwise.estimation.estimate import COMPONENTS
from vramwise.profiles.settings import SETTINGS
from vramwise.surfaces.cli.common import plot, request_of, show_recipe, with_recipe
from vramwise.surfaces.cli.format import bar, gib, print_json, settings_line, summary, write_wrapped
from vramwise.surfaces.cli.parser import SWEEP_LISTS, BadValue, int_list

_SETTING = {s.name: s for s in SETTINGS}


def run(args, out) -> int:
    fmt = "json" if args.json else args.format
    req = request_of(args)
    model, profile, label = req.model, req.profile, req.label
    settings = _sweep_settings(req)
    if req.size_only:
        settings["target_modules"] = None
    sw = sweep(model, profile=profile, trust_remote_code=args.trust_remote_code, **settings)
    if fmt == "json":
        print_json(with_recipe(args, sw.to_dict()), out)
    else:
        if fmt == "table":
            show_recipe(args, out)
        print_sweep(sw, label, profile, settings, fmt, out)
    plot("sweep", sw, args.plot, sys.stderr)
    return 0


def _sweep_settings(req) -> dict:
    """The settings of a sweep: lists for the sweepable settings given with commas (typed by the table)."""
    settings = req.settings_dict()
    for name in SWEEPABLE:
        raw = settings[name]
        if not isinstance(raw, str) or name not in SWEEP_LISTS:
            continue
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not values:
            raise BadValue(f"{_SETTING[name].flag} needs at least one value, got {raw!r}")
        if _SETTING[name].cli_type == "int":
            values = int_list(_SETTING[name].flag, raw)
        values = list(dict.fromkeys(values))
        settings[name] = values if len(values) > 1 else values[0]
    return settings


def print_sweep(sw, label: str, profile: str, fixed: dict, fmt: str, out) -> None:
    comps = COMPONENTS
    names = [a for a, _ in sw.axes]
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(names + list(comps) + ["total", "median_abs_error", "max_abs_error"])
        for vals, e in sw.rows:  # the band's errors as fractions, empty where it is not measured
            b = e.error_band.tensors
            w.writerow(list(vals) + [getattr(e, c) for c in comps] + [e.total, b.median_abs_error, b.max_abs_error])
        return
    out.write(f"{label}\n")
    first = sw.rows[0][1] if sw.rows else None
    if first is not None:
        kind = f" ({first.model_type})" if first.model_type else ""
        out.write(f"family {first.family}{kind}, profile {first.profile}\n")
    text = summary(profile)
    if text:
        write_wrapped(out, f"profile {profile}: {text}")
    if first is not None:
        fixed_words = [w for w in settings_line(first.settings).split(", ")]
        axis_words = {"method": None, "batch_size": "batch", "seq_len": "seq", "lora_rank": "rank",
                      "gradient_checkpointing": "checkpointing", "loss": "loss"}
        keep = []
        for w in fixed_words:
            head = w.split(" ")[0]
            varied = any((axis_words.get(a) == head) for a in names) or (
                "method" in names and w == first.settings.method) or (
                "optimizer" in names and w == first.settings.optimizer) or (
                "attention" in names and w == first.settings.attention)
            if not varied:
                keep.append(w)
        out.write("fixed: " + (", ".join(keep) or "nothing") + "; varied: " + (", ".join(names) or "nothing") + "\n")
    out.write("\n")
    if len(names) == 2:
        (a, av), (b, bv) = sw.axes
        totals = {vals: e.total for vals, e in sw.rows}
        col_w = max(9, *(len(str(v)) for v in bv))
        head = f"{a} \\ {b}"
        row_w = max(len(head), *(len(str(v)) for v in av))
        out.write(f"total GiB: {a} (rows) x {b} (columns)\n")
        out.write(f"{head:<{row_w}}" + "".join(f"  {str(v):>{col_w}}" for v in bv) + "\n")
        for x in av:
            out.write(f"{str(x):<{row_w}}" + "".join(f"  {gib(totals[(x, y)]):>{col_w}}" for y in bv) + "\n")
        _print_bands(sw, out)
        return
    widths = [max(len(n), *(len(str(v)) for v in vals)) for n, vals in sw.axes]
    top = max((e.total for _, e in sw.rows), default=1)
    out.write("".join(f"{n:<{w}}  " for n, w in zip(names, widths)) + f"{'total GiB':>9}\n")
    for vals, e in sw.rows:
        out.write("".join(f"{str(v):<{w}}  " for v, w in zip(vals, widths))
                  + f"{gib(e.total):>9}  {bar(e.total / top, out)}".rstrip() + "\n")
    _print_bands(sw, out)


def _print_bands(sw, out) -> None:
    """The error bands (tensors, device) of each (method, strategy) the sweep went through, a line each."""
    lines = list(dict.fromkeys(line for _, e in sw.rows for line in e.error_band.lines()))
    if lines:
        out.write("\n")
    for line in lines:
        write_wrapped(out, line)
