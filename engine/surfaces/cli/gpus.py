"""``vramwise gpus`` (the NVIDIA GPUs NVML sees) and ``vramwise select`` (which of them a run should use)."""

from __future__ import annotations

from vramwise.errors import SettingsError
from vramwise.surfaces.cli.common import run_estimate
from vramwise.surfaces.cli.format import gib, print_json


def gpus(args, out) -> int:
    from vramwise.gpus.discovery import discover_gpus

    disc = discover_gpus()
    if args.json:
        print_json(disc.to_dict(), out)
        return 0
    if not disc.gpus:
        out.write(f"{disc.reason}\n")
        return 0
    out.write(f"{'id':>3}  {'name':<28} {'total GiB':>10} {'used GiB':>9} {'free GiB':>9}  visible\n")
    for g in disc.gpus:
        seen = "yes" if g.index in disc.visible else ("(by UUID/MIG)" if disc.uses_uuids else "no")
        out.write(f"{g.index:>3}  {g.name[:28]:<28} {gib(g.total):>10} {gib(g.used):>9} {gib(g.free):>9}  {seen}\n")
    if disc.cuda_visible_devices is not None:
        out.write(f"CUDA_VISIBLE_DEVICES={disc.cuda_visible_devices}\n")
    if disc.reason:
        out.write(f"{disc.reason}\n")
    return 0


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
    sel = select_gpus(est, gpu_ids=ids)
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
    out.write(f"GPUs: {', '.join(str(i) for i in sel.gpu_ids) or '(none)'}\n")
    out.write(f"why: {sel.reason}\n")
    if sel.usable_bytes is not None:
        out.write(f"usable: {gib(sel.usable_bytes)} GiB")
        if sel.min_per_gpu_bytes is not None:
            out.write(f", needed per GPU: {gib(sel.min_per_gpu_bytes)} GiB"
                      + (f" with {sel.strategy}" if sel.strategy else ""))
        out.write("\n")
    for g in sel.gpus:
        out.write(f"  GPU {g.index} {g.name}: {gib(g.free)} GiB free of {gib(g.total)}\n")
    out.write(f"device_map: {sel.device_map}\n")
    if sel.cuda_visible_devices is not None:
        out.write(f"CUDA_VISIBLE_DEVICES={sel.cuda_visible_devices}\n")
    return 0
