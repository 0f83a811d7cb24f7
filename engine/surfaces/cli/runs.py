"""``vramwise runs``: the training runs the memory check recorded, each with its predicted and measured
peak and the error, then the error per profile and method."""

from __future__ import annotations

from vramwise.records.runs import RunsDB, summarize
from vramwise.surfaces.cli.format import GIB, print_json

_MIB = 1024**2


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / GIB:,.2f} GiB" if n >= GIB else f"{n / _MIB:,.1f} MiB"


def _percent(e: float | None) -> str:
    return "-" if e is None else f"{e:+.2f} %"


def run(args, out) -> int:
    if args.limit is not None and args.limit < 1:
        from vramwise.surfaces.cli.parser import BadValue

        raise BadValue(f"--limit must be a whole number from 1, got {args.limit}")
    db = RunsDB(args.db)
    runs = db.runs(limit=args.limit)
    summary = summarize(runs)
    if args.json:
        print_json({"database": str(db.path), "runs": [r.to_dict() for r in runs], "summary": summary}, out)
        return 0
    if not runs:
        out.write(f"no runs recorded in {db.path}\n")
        return 0
    out.write(f"{len(runs)} run{'s' if len(runs) != 1 else ''} in {db.path}\n\n")
    rows = [("id", "started (UTC)", "model", "profile", "method", "batch x seq", "device", "predicted", "measured", "error")]
    for r in runs:
        s = r.settings
        shape = f"{s.get('batch_size', '?')} x {s.get('seq_len', '?')}" if s else "-"
        device = (r.device or "-") + (f" (rank {r.rank}/{r.world_size})" if (r.world_size or 1) > 1 else "")
        rows.append((str(r.id), r.started.replace("T", " ")[:19], (r.model or "-")[-40:], r.profile or "-",
                     r.method or "-", shape, device[:32], _size(r.predicted_peak), _size(r.measured_peak),
                     _percent(r.error)))
    _table(rows, out, right=(0, 7, 8, 9))
    out.write("\nerror = (predicted - measured) / measured tensor peak; '-': not measured (the run stopped first)\n\n")
    rows = [("profile", "method", "runs", "measured", "mean |error|", "max |error|")]
    for g in summary:
        mean, top = g["mean_abs_error_percent"], g["max_abs_error_percent"]
        rows.append((g["profile"] or "-", g["method"] or "-", str(g["runs"]), str(g["measured"]),
                     "-" if mean is None else f"{mean:.2f} %", "-" if top is None else f"{top:.2f} %"))
    _table(rows, out, right=(2, 3, 4, 5))
    return 0


def _table(rows: list[tuple], out, right: tuple) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        out.write("  ".join(cells).rstrip() + "\n")
