"""``vramwise fit``: what fits on a GPU (methods, largest batch, sequence and rank, fewest GPUs, frontier)."""

from __future__ import annotations

import os
import sys
import textwrap

from vramwise.answers.fit import MAX_GPUS, fit
from vramwise.answers.local import local_fit
from vramwise.answers.offload import LocalFit
from vramwise.answers.placement import GpuSet, pooled_bytes
from vramwise.profiles.settings import ADAPTER_METHODS
from vramwise.surfaces.cli.common import plot, request_of, show_recipe, with_recipe
from vramwise.surfaces.cli.local import print_local_fit
from vramwise.surfaces.cli.format import WRAP, bar, dash, family_line, fits_word, gib, gpus_word, print_json, summary, write_wrapped
from vramwise.surfaces.cli.parser import BadValue, int_list

_READINGS = {"nvidia-smi": "the total nvidia-smi reports", "rocm-smi": "the total rocm-smi reports",
             "hip-runtime": "the total HIP reports", "spec-sheet": "the vendor's figure"}


def run(args, out) -> int:
    seq_lens = int_list("--seq-lens", args.seq_lens, 1) if args.seq_lens is not None else None
    if args.gpus is not None and not 1 <= args.gpus <= MAX_GPUS:
        raise BadValue(f"--gpus must be a number of GPUs from 1 to {MAX_GPUS:,}, got {args.gpus}")
    if _picks_quant(args):  # a folder of GGUF quantizations or a hub repository's: the table and the pick
        return _run_pick(args, out)
    req = request_of(args)
    label = req.label
    if args.preset or args.modelfile or args.ollama_env:  # a runtime's defaults, environment and Modelfile
        return _run_preset(args, req, out)
    if req.recipe is not None:  # the flags given are in the recipe already; the advice is written in its keys
        f = fit(req.recipe, gpu=args.gpu, gpus=args.gpus, headroom=args.headroom, seq_lens=seq_lens,
                trust_remote_code=args.trust_remote_code)
    else:
        gpus, req = req.with_launch_gpus(args.gpus, "world_size" in getattr(args, "given_flags", ()))
        settings = req.settings_dict(skip=("gpu",))
        if req.size_only:
            settings["target_modules"] = None
        f = fit(req.model, gpu=args.gpu, gpus=gpus, headroom=args.headroom, seq_lens=seq_lens, profile=req.profile,
                trust_remote_code=args.trust_remote_code, **settings)
    serving = not hasattr(f, "frontier")  # a serving profile's answers (vramwise.answers.serving.ServingFit)
    if isinstance(f, LocalFit):  # the GPUs and the host (vramwise.answers.local)
        if args.plot:
            raise BadValue("--plot draws a training fit's frontier; a local-inference fit has none")
        if args.json:
            print_json(f.to_dict(), out)
        else:
            print_local_fit(f, label, out, _gpu_words(f))
        return 0
    if args.json:
        print_json(with_recipe(args, f.to_dict()), out)
    elif serving:
        from vramwise.surfaces.cli.serving import print_serving_fit

        print_serving_fit(f, label, out)
    else:
        show_recipe(args, out)
        print_fit(f, label, out)
    if not serving:
        plot("fit", f, args.plot, sys.stderr)
    elif args.plot:
        raise BadValue("--plot draws a training fit's frontier; a serving profile's fit has none")
    return 0


def _run_preset(args, req, out) -> int:
    """fit under a runtime preset: its settings from the Modelfile, the environment and its defaults, the flags
    given winning."""
    import os

    from vramwise.inputs.presets import preset

    if req.recipe is not None or req.size_only:
        raise BadValue("--preset, --modelfile and --ollama-env take a GGUF model, not a recipe or a size")
    if args.gpus not in (None, 1):
        raise BadValue("a preset's answers are for one GPU and the host: leave --gpus out")
    name = args.preset or "ollama"
    given = getattr(args, "given_flags", set())
    profile = req.profile if "profile" in given else preset(name).profile
    settings = {k: v for k, v in req.settings.items() if k in given}
    f = local_fit(req.model, gpu=args.gpu, headroom=args.headroom, profile=profile, preset=name,
                  modelfile=args.modelfile, environ=os.environ if args.ollama_env else None,
                  trust_remote_code=args.trust_remote_code, **settings)
    if args.plot:
        raise BadValue("--plot draws a training fit's frontier; a local-inference fit has none")
    if args.json:
        print_json(f.to_dict(), out)
    else:
        print_local_fit(f, req.label, out, _gpu_words(f))
    return 0


def _picks_quant(args) -> bool:
    """Whether fit picks among quantizations: a local-inference profile and --quant, a hub repository, or a folder
    holding several GGUF models."""
    from vramwise.answers.offload import is_local
    from vramwise.answers.quant_pick import quant_models
    from vramwise.estimation.registry import Registry
    from vramwise.inputs.catalog import HUB_PREFIX

    model, quant = args.model, getattr(args, "quant", None)
    if model is None or args.recipe or args.preset or args.modelfile or args.ollama_env:
        if quant is not None:
            raise BadValue("--quant picks a quantization of a folder of GGUF files or hub:ORG/NAME, under --profile "
                           "llama.cpp (not with a recipe or a preset)")
        return False
    reg = Registry.default()
    local = args.profile in reg.profile_names() and is_local(reg.profile(args.profile))
    hub = model.startswith(HUB_PREFIX) or (args.hub and not os.path.exists(model))
    if quant is not None:
        if not local:
            raise BadValue(f"--quant picks a GGUF quantization under a local-inference profile (--profile llama.cpp), "
                           f"not {args.profile}")
        if not hub and not os.path.isdir(model):
            raise BadValue(f"--quant picks a quantization of a folder of GGUF files or hub:ORG/NAME; {model} is one "
                           "file: give its folder")
        return True
    return local and (hub or quant_models(model) > 1)


def _run_pick(args, out) -> int:
    """fit over the quantizations of a folder or a hub repository (vramwise.answers.quant_pick)."""
    import copy

    from vramwise.answers.quant_pick import quant_pick
    from vramwise.inputs.catalog import HUB_PREFIX
    from vramwise.inputs.gguf_sets import folder_gguf

    if args.gpus not in (None, 1):
        raise BadValue("the local answers are for one GPU and the host: leave --gpus out")
    if args.plot:
        raise BadValue("--plot draws a training fit's frontier; a local-inference fit has none")
    model = args.model
    hub = model.startswith(HUB_PREFIX) or args.hub
    source = model if not hub or model.startswith(HUB_PREFIX) else HUB_PREFIX + model
    ns = copy.copy(args)  # the settings' flags read as for one model: a file of the folder, or the hub id
    ns.hub = False
    sets = () if hub else folder_gguf(model)
    ns.model = sets[0].files[0] if sets else source
    req = request_of(ns)
    p = quant_pick(source, gpu=args.gpu, quant=args.quant, headroom=args.headroom, profile=req.profile,
                   **req.settings_dict(skip=("gpu",)))
    if args.quant is not None:
        o = p.options[0]
        if args.json:
            print_json({**o.fit.to_dict(), "source": p.source, "revision": p.revision,
                        "quantization": o.to_dict()}, out)
        else:
            at = f" at {p.revision}" if p.revision else ""
            print_local_fit(o.fit, f"{source}{at}: {o.name} ({', '.join(o.files)})", out, _gpu_words(o.fit))
        return 0
    if args.json:
        print_json(p.to_dict(), out)
    else:
        print_quant_pick(p, out)
    return 0


def print_quant_pick(p, out) -> None:
    """The quantizations side by side (a :class:`~vramwise.answers.quant_pick.QuantPick`), then the pick."""
    first = p.options[0].fit
    fig, s = first.estimate.figures, first.estimate.settings
    est = (p.pick or p.options[0]).fit.estimate
    at = f" at {p.revision}" if p.revision else ""
    out.write(f"{p.source}{at}: {len(p.options)} quantization{'s' if len(p.options) != 1 else ''}\n")
    _heading(out, est, first.profile, first)
    out.write("\n")
    layers = "all" if s.n_gpu_layers is None else s.n_gpu_layers
    write_wrapped(out, f"at n_ctx {fig['n_ctx']:,} (n_parallel {s.n_parallel}, cache {s.cache_type_k}/"
                       f"{s.cache_type_v}, n_gpu_layers {layers}); largest n_ctx at n_gpu_layers {layers}; "
                       f"n_gpu_layers: the most that fit at n_ctx {fig['n_ctx']:,}, of {first.layers + 1}")
    no = dash(out)
    rows = [("quant", "file type", "weights GiB", "GPU GiB", "host GiB", "verdict", "largest n_ctx", "n_gpu_layers",
             "file")]
    for o in p.options:
        f = o.fit
        ctx = no if f.max_n_ctx is None else f"{f.max_n_ctx:,}" + ("*" if f.max_n_ctx != f.max_n_ctx_memory else "")
        rows.append((o.name, o.file_type or no, gib(o.weight_bytes), gib(o.gpu_bytes), gib(o.host_bytes),
                     f.verdict.label, ctx, "all" if f.all_layers else str(f.max_n_gpu_layers),
                     _shown_file(p, o.files[0]) + (f" (+{len(o.files) - 1} shards)" if len(o.files) > 1 else "")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {2, 3, 4, 6, 7}
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.write("  ".join(cells).rstrip() + "\n")
    if any(o.fit.max_n_ctx is not None and o.fit.max_n_ctx != o.fit.max_n_ctx_memory for o in p.options):
        out.write("* capped at the model's training context per sequence; memory alone allows more\n")
    out.write("\n")
    write_wrapped(out, f"pick: {p.pick.name if p.pick is not None else 'none'}: {p.reason}")
    shown = p.pick.fit if p.pick is not None else first
    for w in shown.estimate.warnings:
        write_wrapped(out, f"warning: {w}")


def _shown_file(p, path: str) -> str:
    """A file of a quantization as the table shows it: a repository's path, or its path inside the folder."""
    return path if p.revision is not None else os.path.relpath(path, p.source)


def _gpu_words(fit_result) -> list[str]:
    """Where the GPU's memory figure comes from, and the usable memory, in a few lines."""
    g = fit_result.gpu
    lines = [f"GPU: {g.name}, {gib(g.memory_bytes)} GiB ({g.memory_bytes:,} bytes) each"
             + (f", {fit_result.gpus} of them" if fit_result.gpus > 1 else "")]
    reading = None
    note = None
    spec = g.matched  # how the name asked for was matched (None: bytes given, or the local GPUs)
    if spec is not None and not g.source.startswith(("NVML", "given in bytes")):
        if spec.matched_by == "ambiguous" and spec.note:
            note = f"note: {spec.note} (name another: {', '.join(spec.alternatives)})"
        reading = None if spec.matched_by == "size" else _READINGS.get(spec.memory_reading, spec.memory_reading)
    if spec is not None and spec.unified:  # the budget in one line, then the system's memory and its source
        from vramwise.inputs.gpu_catalog import unified_budget

        lines.append(unified_budget(spec).line())
        lines.append(f"memory figure: {reading}, the system's memory; source: {spec.source}")
    else:
        lines.append(f"memory figure: {reading}; source: {g.source}" if reading else f"memory figure: {g.source}")
    if note:
        lines.append(note)
    est = fit_result.estimate
    over = f"; the estimates already count the profile's overhead ({gib(est.overhead)} GiB)" if est is not None else ""
    lines.append(f"usable per GPU: {gib(fit_result.usable_bytes)} GiB = the memory less "
                 f"{fit_result.headroom * 100:.3g}% headroom{over}")
    if fit_result.verdict is not None:
        lines.append(fit_result.verdict.headroom_why)
    return lines


def _heading(out, est, profile: str, fit_result) -> None:
    """The model's family line (where there is an estimate), the profile's summary and the GPU in words."""
    if est is not None:
        out.write(family_line(est) + "\n")
    text = summary(profile)
    if text:
        write_wrapped(out, f"profile {profile}: {text}")
    for line in _gpu_words(fit_result):
        write_wrapped(out, line)


def print_fit(f, label: str, out) -> None:
    est = f.estimate
    out.write(f"{label}\n")
    _heading(out, est, f.profile, f)
    n, usable = f.gpus, f.usable_bytes
    on = f"{n} GPU" + ("s" if n > 1 else "")
    out.write("\n")
    if est is not None:
        placed, verdict = f.placement, f.verdict.head(placed=False)
        if est.strategy is not None:
            write_wrapped(out, f"at these settings: strategy {est.strategy} on {on}, {gib(placed.per_gpu)} GiB on each: "
                          f"{verdict}")
        elif placed.best:  # the best strategy places the run; the verdict names it
            write_wrapped(out, f"at these settings: {gib(est.total)} GiB in all; on {on} with {placed.strategy}: "
                          f"{gib(placed.per_gpu)} GiB per GPU, the least of the strategies the profile models: {verdict}")
        elif placed.per_gpu is None:
            write_wrapped(out, f"at these settings: {gib(est.total)} GiB in all: {verdict}")
        else:
            need = placed.per_gpu
            write_wrapped(out, f"at these settings: {gib(est.total)} GiB in all, {gib(need)} GiB per GPU on {on}: {verdict}")
        for line in est.error_band.lines():
            write_wrapped(out, line)
        out.write("\n")
    width = max(len(m.method) for m in f.methods) if f.methods else 6
    out.write(f"{'method':<{width}}  {'total GiB':>9}  {'per GPU':>9}  fits  of usable\n")
    no = dash(out)
    for m in f.methods:
        if m.total is None:
            out.write(f"{m.method:<{width}}  {no:>9}  {no:>9}  no    {m.problem}\n")
            continue
        if m.per_gpu is None:  # no strategy runs it on these GPUs
            out.write(f"{m.method:<{width}}  {gib(m.total):>9}  {no:>9}  no    {m.problem}\n")
            continue
        by = f"  with {m.strategy}" if m.strategy else ""
        out.write(f"{m.method:<{width}}  {gib(m.total):>9}  {gib(m.per_gpu):>9}  {fits_word(m.fits):<4}  "
                  f"{bar(m.per_gpu / usable, out)}{'+' if m.per_gpu > usable else ''}{by}".rstrip() + "\n")
    if any(m.method == "inference" and m.total is not None for m in f.methods):
        out.write("(inference: the profile's rule; `estimate --method inference` adds the KV cache)\n")
    out.write("\n")
    s = est.settings if est is not None else None
    if s is not None:
        out.write(f"largest batch size at seq {s.seq_len:,}: "
                  + (f"{f.max_batch_size:,}" if f.max_batch_size else "none (batch 1 does not fit)") + "\n")
        out.write(f"largest sequence length at batch {s.batch_size:,}: "
                  + (f"{f.max_seq_len:,}" if f.max_seq_len else "none (1 token does not fit)") + "\n")
        for note in f.notes:
            write_wrapped(out, f"note: {note}")
        if s.method in ADAPTER_METHODS:
            out.write("largest LoRA rank: " + (f"{f.max_lora_rank:,}" if f.max_lora_rank else "none (rank 1 does not fit)") + "\n")
        else:
            out.write(f"largest LoRA rank: {no} ({s.method} trains no adapters)\n")
        write_wrapped(out, _min_gpus_line(f))
    out.write("\n")
    _print_frontier(f, out)
    if not f.fits and est is not None:
        out.write("\n")
        _print_advice(f, out)
    if est is not None:
        for w in est.warnings:
            write_wrapped(out, f"warning: {w}")


def _min_gpus_line(f) -> str:
    est, k, usable, share = f.estimate, f.min_gpus, f.usable_bytes, f.further_gpu_share
    name = f.gpu.name
    if k is None:
        return f"fewest GPUs: none up to {MAX_GPUS:,} x {name} holds it"
    placed = f.min_gpus_placement
    need = placed.per_gpu
    if placed.best:
        return (f"fewest GPUs: {k} x {name}: on {gpus_word(k)} with {placed.strategy} (the least per GPU of the "
                f"strategies the profile models) {gib(need)} GiB on each (<= {gib(usable)} GiB usable)")
    if est.strategy is not None:
        return (f"fewest GPUs: {k} x {name}: strategy {est.strategy} on {gpus_word(k)} needs {gib(need)} GiB on each "
                f"(<= {gib(usable)} GiB usable)")
    if k == 1:
        return (f"fewest GPUs: 1 x {name}: the total {gib(est.total)} GiB fits the usable {gib(usable)} GiB "
                f"of one GPU")
    covered = pooled_bytes(GpuSet.alike(usable, k), share)
    return (f"fewest GPUs: {k} x {name}, by the selection rule: each GPU holds the per-GPU minimum for {k} "
            f"({gib(need)} GiB <= {gib(usable)} GiB usable) and the first GPU in full plus {share * 100:g}% of each "
            f"further one ({gib(covered)} GiB) covers the total {gib(est.total)} GiB")


def _print_frontier(f, out) -> None:
    if not f.frontier:
        return
    out.write(f"frontier: the largest batch at each sequence length, on {f.gpus} x {f.gpu.name}\n")
    out.write(f"{'seq_len':>10}  {'max batch':>10}\n")
    for s, b in f.frontier:
        if b is None:
            rest = [x for x, y in f.frontier if x > s]
            if all(y is None for x, y in f.frontier if x > s) and rest:
                out.write(f"{s:>10,}  {'none fits':>10}  (nor at any longer sequence of the grid)\n")
                return
            out.write(f"{s:>10,}  {'none fits':>10}\n")
            continue
        out.write(f"{s:>10,}  {b:>10,}\n")


def _change_text(name: str, value) -> str:
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return f"{name}={value}"


def _print_advice(f, out) -> None:
    """What to change so it fits: each change, the per-GPU figure after it and whether it fits."""
    if f.verdict is not None and f.verdict.runs_on is not None:  # hardware/runs_on.yaml: the settings do not run there
        write_wrapped(out, "advice: none until the settings run on this GPU; change what the verdict names first")
        return
    if not f.advice:
        out.write("advice: no change vramwise models makes it fit\n")
        _print_blocked(f, out)
        return
    write_wrapped(out, f"advice: what to change so it fits on {f.gpus} x {f.gpu.name} ({gib(f.usable_bytes)} GiB usable "
                  "each), the least change to the training first")
    if not any(a.fits for a in f.advice):
        out.write("no change found makes it fit, alone or combined; each of these on its own:\n")
    for a in f.advice:
        on = (f" on {gpus_word(a.gpus)}" if a.gpus != f.gpus or a.strategy else "") + (f" with {a.strategy}" if a.strategy else "")
        verdict = "fits" if a.fits else "does not fit"
        _wrap(out, f"{a.rank:>3}. {gib(a.per_gpu)} GiB per GPU{on}, {verdict}: {a.description}", "       ")
        _wrap(out, "set " + ", ".join(_change_text(k, v) for k, v in a.changes.items()), "       ", "       ")
        if a.recipe_changes:
            _wrap(out, "in the recipe: " + ", ".join(f"{k}: {_recipe_value(v)}" for k, v in a.recipe_changes.items()),
                  "       ", "       ")
    _print_blocked(f, out)


def _print_blocked(f, out) -> None:
    """The changes left out of the advice because the stack cannot run them, each with its warning."""
    for change, why in f.blocked:
        _wrap(out, f"blocked: {change} ({why})", "    ")


def _wrap(out, text: str, rest: str, first: str = "") -> None:
    out.write(textwrap.fill(text, width=WRAP, initial_indent=first, subsequent_indent=rest, break_long_words=True,
                            break_on_hyphens=False) + "\n")


def _recipe_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)
