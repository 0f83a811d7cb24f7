"""``vramwise compare``: methods and profiles side by side, a column each and a row per component."""

from __future__ import annotations

import sys

from vramwise.answers.fit import MAX_GPUS, compare
from vramwise.profiles.bands import percent
from vramwise.estimation.estimate import COMPONENTS
from vramwise.surfaces.cli.common import plot, request_of, show_recipe, with_recipe
from vramwise.surfaces.cli.format import applies, bar, dash, fits_word, gib, print_json, summary, write_wrapped
from vramwise.surfaces.cli.parser import BadValue, name_list


def run(args, out) -> int:
    methods = name_list(args.methods)
    if not methods:
        raise BadValue(f"--methods needs at least one method, got {args.methods!r}")
    if args.gpus is not None and args.gpu is None:
        raise BadValue("--gpus needs --gpu (the kind of GPU to count)")
    if args.gpus is not None and not 1 <= args.gpus <= MAX_GPUS:
        raise BadValue(f"--gpus must be a number of GPUs from 1 to {MAX_GPUS:,}, got {args.gpus}")
    given = set(getattr(args, "given_flags", ()))
    req = request_of(args)
    label, size_only = req.label, req.size_only
    profiles = name_list(args.profiles) if args.profiles is not None else [req.profile]
    if not profiles:
        raise BadValue(f"--profiles needs at least one profile, got {args.profiles!r}")
    if args.profiles is not None and "profile" in given and args.profile not in profiles:
        raise BadValue(f"compare's profiles are --profiles (a column each): --profile {args.profile} is not among "
                       f"--profiles {args.profiles}; add it there, or leave --profile out")
    if size_only:
        profiles = ["size_only"]
    settings = req.settings_dict(skip=("method", "gpu"))
    if size_only:
        settings["target_modules"] = None
    c = compare(req.model, methods=list(dict.fromkeys(methods)), profiles=list(dict.fromkeys(profiles)), gpu=args.gpu,
                gpus=args.gpus, trust_remote_code=args.trust_remote_code, **settings)
    if args.json:
        print_json(with_recipe(args, c.to_dict()), out)
    else:
        show_recipe(args, out)
        print_compare(c, label, {**settings}, out)
    plot("compare", c, args.plot, sys.stderr)
    return 0


def print_compare(c, label: str, settings: dict, out) -> None:
    cells = c.cells
    profiles = list(dict.fromkeys(p for p, *_ in cells))
    one_profile = len(profiles) == 1
    heads = [m if one_profile else f"{p}/{m}" for p, m, *_ in cells]
    out.write(f"{label}\n")
    for p in profiles:
        text = summary(p)
        write_wrapped(out, f"profile {p}" + (f": {text}" if text else ""))
    shown = dict(settings)
    methods = [m for _, m, *_ in cells]
    parts = [f"batch {shown['batch_size']}", f"seq {shown['seq_len']}"]
    if any(applies("lora_rank", m) for m in methods):
        parts.append(f"rank {shown['lora_rank']} (adapters)")
    if any(applies("gradient_checkpointing", m) for m in methods):
        parts.append(f"checkpointing {shown['gradient_checkpointing']}")
    if any(applies("optimizer", m) for m in methods):
        parts.append(str(shown["optimizer"]))
    parts.append(str(shown["attention"]))
    out.write("settings: " + ", ".join(parts) + "\n\n")
    width = max(9, *(len(h) for h in heads))
    name_w = 12
    if c.gpu is not None:
        fits_label = f"fits {c.gpu.name}" if len(c.gpu.name) <= 24 else "fits the GPU"
        name_w = max(name_w, len(fits_label))
    no = dash(out)
    out.write(f"{'GiB':<{name_w}}" + "".join(f"  {h:>{width}}" for h in heads) + "\n")
    for comp in COMPONENTS + ("total",):
        row = []
        for _, _, est, _, _ in cells:
            row.append(gib(getattr(est, comp)) if est is not None else no)
        out.write(f"{comp:<{name_w}}" + "".join(f"  {v:>{width}}" for v in row) + "\n")
    if c.gpu is not None:  # yes: with the device band's p90 shortfall free; tight: the GPU holds the total only
        words = {"fits": fits_word(True), "tight": "tight", "does not fit": fits_word(False), "does not run": "cannot run"}
        out.write(f"{fits_label:<{name_w}}" + "".join(
            f"  {(words[v] if est is not None else no):>{width}}" for (_, _, est, _, _), v in zip(cells, c.verdicts))
            + "\n")
    bands = [est.error_band if est is not None else None for _, _, est, _, _ in cells]
    for name, attr in (("median |err|", "median_abs_error"), ("max |err|", "max_abs_error")):  # tensors
        out.write(f"{name:<{name_w}}" + "".join(
            f"  {(percent(getattr(b.tensors, attr), '') if b is not None and b.tensors.measured else no):>{width}}"
            for b in bands) + "\n")
    out.write(f"{'device p90':<{name_w}}" + "".join(
        f"  {(percent(b.device.p90_abs_error, '') if b is not None and b.device.covered else no):>{width}}"
        for b in bands) + "\n")
    totals = [(h, est.total) for h, (_, _, est, _, _) in zip(heads, cells) if est is not None]
    if totals:
        top = max(t for _, t in totals)
        hw = max(len(h) for h, _ in totals)
        out.write("\n")
        for h, t in totals:
            out.write(f"{h:<{hw}}  {gib(t):>9} GiB  {bar(t / top, out, 20)}".rstrip() + "\n")
    for line in dict.fromkeys(line for b in bands if b is not None for line in b.lines()):
        write_wrapped(out, line)
    for p, m, est, problem, _ in cells:
        if est is None:
            write_wrapped(out, f"{p}/{m}: {problem}")
    for line in dict.fromkeys(line for line in c.runs_on if line):  # hardware/runs_on.yaml: what does not run there
        write_wrapped(out, f"cannot run: {line}")
    if c.gpu is not None:
        write_wrapped(out, f"GPU: {c.gpu.name}, {gib(c.gpu.memory_bytes)} GiB each"
                           + (f", {c.gpu.count} of them" if c.gpu.count > 1 else "") + f" (source: {c.gpu.source})")
    if any(m == "inference" and est is not None for _, m, est, _, _ in cells):
        out.write("inference: the profile's rule; `estimate --method inference` adds the KV cache\n")
    seen = set()
    for _, _, est, _, _ in cells:
        for w in (est.warnings if est is not None else ()):
            if w not in seen:
                seen.add(w)
                write_wrapped(out, f"warning: {w}")
