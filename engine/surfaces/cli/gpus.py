"""``vramwise gpus`` (the devices every discovery backend sees, or with ``--catalog`` the GPU catalog) and ``vramwise select``
(which of them a run should use)."""

from __future__ import annotations

from vramwise.errors import SettingsError
from vramwise.surfaces.cli.common import run_estimate
from vramwise.surfaces.cli.format import gib, print_json, write_wrapped


def gpus(args, out) -> int:
    from vramwise.gpus.discovery import NVIDIA, discover_gpus

    if args.catalog:
        return catalog(args, out)
    if args.query:
        raise SettingsError(f"vramwise gpus takes no QUERY without --catalog, got {' '.join(args.query)!r}")
    disc = discover_gpus()
    if args.json:
        print_json(disc.to_dict(), out)
        return 0
    devices = [(b, d) for b in disc.backends for d in b.devices]
    if not devices:
        for b in disc.backends:
            out.write(f"{b.reason}\n")
        out.write("no GPU found: a run here uses the CPU\n")
        return 0
    out.write(f"{'backend':<7} {'id':>3}  {'name':<28} {'total GiB':>10} {'used GiB':>9} {'free GiB':>9}  "
              f"{'visible':<13} selected by\n")
    for b, g in devices:
        if b.backend == NVIDIA and disc.uses_uuids:
            seen = "yes" if g.index in disc.visible else "(by UUID/MIG)"
        else:
            seen = "yes" if g.index in b.visible else "no"
        mark = " (unified)" if g.unified else ""
        name = g.name[:28 - len(mark)] + mark  # the mark stays when a long name is cut to the column
        used = "-" if g.used is None else gib(g.used)
        free = "-" if g.free is None else gib(g.free)
        var = f"{g.visibility_variable}={g.index}" if g.visibility_variable else "-"
        out.write(f"{g.backend:<7} {g.index:>3}  {name[:28]:<28} {gib(g.total):>10} {used:>9} {free:>9}  "
                  f"{seen:<13} {var}\n")
    for b in disc.backends:
        if b.variable_value is not None and b.devices:
            out.write(f"{b.variable}={b.variable_value}\n")
    for g in (g for _, g in devices if g.memory_source):
        out.write(f"{g.backend} {g.index}: total is what its GPU may use, from {g.memory_source}\n")
    for b in disc.backends:
        if b.reason and b.devices:  # what a visibility variable hides; backends that found nothing stay quiet
            out.write(f"{b.reason}\n")
    return 0


def catalog(args, out) -> int:
    """``vramwise gpus --catalog [QUERY]``: the GPUs ``--gpu`` knows, filtered by the words of QUERY."""
    import re

    from vramwise.inputs.gpu_catalog import list_ambiguous_gpu_names, list_gpus

    def key(text: str) -> str:  # lower case, no separators; brand words kept, so "amd" or "radeon" filter
        return re.sub(r"[\s\-_./]+", "", text.lower())

    words = [key(w) for w in args.query if key(w)]

    def keep(names) -> bool:
        keys = [key(n) for n in names]
        return all(any(w in k for k in keys) for w in words)

    gpus = [g for g in list_gpus() if keep((g.id, g.name, g.vendor, *g.aliases))]
    shown = {g.id for g in gpus}
    ambiguous = [a for a in list_ambiguous_gpu_names() if set(a.candidates) & shown]
    if args.json:
        print_json({
            "query": " ".join(args.query),
            "gpus": [{"id": g.id, "name": g.name, "vendor": g.vendor, "memory_bytes": g.memory_bytes,
                      "memory_reading": g.memory_reading, "source": g.source, "aliases": list(g.aliases),
                      "note": g.note, "cuda_total_bytes": g.cuda_total_bytes, "unified": g.unified,
                      "gpu_may_use_bytes": _budget(g).gpu_bytes if g.unified else None,
                      "budget": _budget(g).line() if g.unified else None} for g in gpus],
            "ambiguous": [{"name": a.name, "default": a.default, "candidates": list(a.candidates),
                           "reason": a.reason} for a in ambiguous],
        }, out)
        return 0
    if not gpus:
        out.write(f"no GPU of the catalog matches {' '.join(args.query)!r}\n")
        return 0
    out.write(f"{'id':<24} {'vendor':<7} {'GiB':>7}  {'figure':<11} {'name'}\n")
    for g in gpus:
        out.write(f"{g.id:<24} {g.vendor:<7} {gib(g.memory_bytes):>7}  {g.memory_reading:<11} {g.name}\n")
        if g.aliases:
            out.write(f"{'':<24} also: {', '.join(g.aliases)}\n")
        if g.unified:
            out.write(f"{'':<24} {_budget(g).line()}\n")
    for a in ambiguous:
        others = ", ".join(c for c in a.candidates if c != a.default)
        out.write(f"{a.name!r} matches {', '.join(a.candidates)}: taken as {a.default} ({a.reason}); "
                  f"name {others} to choose\n")
    out.write(f"{len(gpus)} of {len(list_gpus())} GPUs; GiB = 2**30 bytes, the memory as the driver reports it "
              f"(figure: nvidia-smi, rocm-smi, hip-runtime) or the vendor's (spec-sheet)\n")
    return 0


def _budget(g):
    """What the GPU of a unified-memory catalog entry may use (its memory is the system's)."""
    from vramwise.inputs.gpu_catalog import unified_budget

    return unified_budget(g)


def select(args, out) -> int:
    from vramwise.answers.selection import select_gpus

    ids = None
    if args.gpu_ids is not None:
        try:
            ids = [int(x) for x in args.gpu_ids.split(",") if x.strip()]
        except ValueError:
            raise SettingsError(f"--gpu-ids must be comma-separated GPU ids, got {args.gpu_ids!r}") from None
    est, note = None, None
    if args.model is None and args.params is None and args.weight_bytes is None and not args.recipe:
        note = "no MODEL given"  # the documented fallback of select_gpus(None): every visible GPU
    else:  # a model that cannot be estimated is bad input, not a reason to take every GPU
        est = run_estimate(args)
    sel = select_gpus(est, gpu_ids=ids, backend=args.backend)
    if args.json:
        data = sel.to_dict()
        data["estimate_problem"] = note
        print_json(data, out)
        return 0
    if est is not None:
        out.write(f"estimate: {gib(est.total)} GiB total ({est.family}, {est.settings.method})\n")
    elif note:
        out.write(f"no estimate: {note}\n")
    out.write(f"mode: {sel.mode}\n")
    out.write(f"backend: {sel.backend}\n")
    out.write(f"GPUs: {', '.join(str(i) for i in sel.gpu_ids) or '(none)'}\n")
    write_wrapped(out, f"why: {sel.reason}")
    if sel.usable_bytes is not None:
        out.write(f"usable: {gib(sel.usable_bytes)} GiB")
        if sel.min_per_gpu_bytes is not None:
            out.write(f", needed per GPU: {gib(sel.min_per_gpu_bytes)} GiB"
                      + (f" with {sel.strategy}" if sel.strategy else ""))
        out.write("\n")
    for g in sel.gpus:
        free = f"{gib(g.free)} GiB free" if g.free is not None else "free memory unknown"
        out.write(f"  GPU {g.index} {g.name}: {free} of {gib(g.total)}" + (" (unified)" if g.unified else "") + "\n")
    out.write(f"device_map: {sel.device_map}\n")
    if sel.visibility is not None:
        out.write("{}={}\n".format(*sel.visibility))
    return 0
