"""``vramwise estimate``: the memory breakdown of a training run, as a table or JSON."""

from __future__ import annotations

import sys
from typing import Sequence

from vramwise.answers.placement import inference_split, per_gpu_by_strategy
from vramwise.estimation.estimate import COMPONENTS, Estimate
from vramwise.answers.profile_note import other_profile
from vramwise.errors import SettingsError
from vramwise.surfaces.cli.common import note_line, plot, request_of, show_recipe, with_recipe
from vramwise.surfaces.cli.format import bar, count, family_line, gib, gpus_word, print_json, write_wrapped
from vramwise.surfaces.cli.parser import BadValue, int_list
from vramwise.surfaces.request import CLI_NAMES, refuse_serving_gpus
from vramwise.surfaces.views import estimate_view, report_lines

#: the most GPUs --gpus may count
MAX_GPU_COUNT = 1 << 20

def _usage(check, *a):
    """A refusal of flags that disagree with each other, with the command's usage line after it."""
    try:
        return check(*a)
    except SettingsError as e:
        raise BadValue(str(e)) from None


def run(args, out) -> int:
    gpus = int_list("--gpus", args.gpus or "1,2,4,8", 1, MAX_GPU_COUNT)  # arguments: checked before any work
    req = request_of(args)
    if args.preset or args.modelfile or args.ollama_env:  # a runtime's defaults, environment and Modelfile
        return _run_preset(args, req, gpus, out)
    if args.gpus is not None and _local(req):  # --gpus N: the GPUs llama.cpp splits the model over (gpu_count)
        req = _local_gpus(args, req, gpus)
    if req.settings.get("gpu") is not None and _local(req):  # a local run's figures, then whether they fit
        return _run_local_on_gpu(args, req, gpus, out)
    if args.gpus is not None:  # with a strategy, --gpus N is the world size (refused where it means else)
        given = getattr(args, "given_flags", ())
        req = _usage(req.with_strategy_gpus, gpus, args.world_size if "world_size" in given else None, CLI_NAMES)
    est = req.estimate()
    if args.gpus is not None:
        _usage(refuse_serving_gpus, est, CLI_NAMES)
    if args.json:
        print_json(with_recipe(args, estimate_view(est, gpus), est), out)
    elif est.serving is not None:
        from vramwise.surfaces.cli.serving import print_serving_estimate

        show_recipe(args, out, estimate=est)
        print_serving_estimate(est, req.label, out)
    else:
        show_recipe(args, out, estimate=est)
        print_table(est, req.label, gpus, out, note=note_line(other_profile(est)))
    plot("estimate", est, args.plot, sys.stderr)
    return 0


def _local(req) -> bool:
    """Whether the request's profile splits a GGUF model between the GPUs and the host (the local answers')."""
    if req.recipe is not None or req.size_only:
        return False
    from vramwise.answers.offload import is_local
    from vramwise.estimation.registry import Registry

    try:
        return is_local(Registry.default().profile(req.profile))
    except SettingsError:
        return False


def _local_gpus(args, req, gpus: Sequence[int]):
    """The request with ``--gpus N`` as the number of GPUs a local-inference profile splits the model over."""
    given = getattr(args, "given_flags", ())
    if len(gpus) != 1:
        raise BadValue("under a local-inference profile --gpus is the number of GPUs the model is split over: give one "
                       "number (--gpus 2)")
    if "gpu_count" in given and req.settings.get("gpu_count") != gpus[0]:
        raise BadValue(f"--gpus {gpus[0]} and --gpu-count {req.settings.get('gpu_count')} disagree: give one of them")
    return req.with_settings(gpu_count=gpus[0])


def _run_local_on_gpu(args, req, gpus: Sequence[int], out) -> int:
    """estimate under a local-inference profile with --gpu: the estimate (per device: weights, KV cache, output
    buffer), then fit's verdict on that GPU (vramwise.answers.offload)."""
    from vramwise.answers.fit import fit
    from vramwise.surfaces.cli.fit import _gpu_words

    settings = req.settings_dict(skip=("gpu",))
    est = req.with_settings(gpu=None).estimate()
    f = fit(req.model, gpu=req.settings["gpu"], profile=req.profile, trust_remote_code=req.trust_remote_code,
            **settings)
    if args.json:
        print_json({**estimate_view(est, gpus), "fit": f.to_dict()}, out)
        return 0
    print_table(est, req.label, gpus, out, note=note_line(other_profile(est)))
    out.write("\n")
    for line in _gpu_words(f):
        write_wrapped(out, line)
    fig = f.estimate.figures
    if f.gpus > 1:  # every GPU must fit: the verdict is the one that holds the most
        each = ", ".join(f"GPU {g} {gib(t)} GiB" for g, t in enumerate(f.per_gpu))
        write_wrapped(out, f"on the {f.gpus} GPUs: {each}; on the host: {gib(fig['host_total'])} GiB: "
                           f"{f.verdict.head()}")
    else:
        write_wrapped(out, f"on the GPU: {gib(fig['gpu_total'])} GiB, on the host: {gib(fig['host_total'])} GiB: "
                           f"{f.verdict.head()}")
    write_wrapped(out, "the largest n_ctx, the layers to offload and the parallel sequences that fit: vramwise fit "
                       "with the same flags")
    return 0


def _run_preset(args, req, gpus: Sequence[int], out) -> int:
    """estimate under a runtime preset (vramwise.inputs.presets): its settings from the Modelfile, the environment
    and its defaults, each with its origin, the flags given winning; a default that depends on the GPU (Ollama's
    context) asks for fit --gpu or the option that sets it."""
    import os

    from vramwise.estimation.estimate import estimate, load_model
    from vramwise.inputs.presets import preset, preset_settings
    from vramwise.surfaces.cli.local import preset_lines

    if req.recipe is not None or req.size_only:
        raise BadValue("--preset, --modelfile and --ollama-env take a GGUF model, not a recipe or a size")
    name = args.preset or "ollama"
    given = getattr(args, "given_flags", set())
    profile = req.profile if "profile" in given else preset(name).profile
    spec = load_model(req.model, trust_remote_code=args.trust_remote_code)
    train = spec.facts.get("max_position_embeddings")
    got = preset_settings(name, modelfile=args.modelfile, environ=os.environ if args.ollama_env else None,
                          ctx_train=train if isinstance(train, int) and not isinstance(train, bool) else 0)
    mine = {k: v for k, v in req.settings.items() if k in given}
    est = estimate(spec, profile=profile, **{**got.settings, **mine})
    origins = {**got.origins, **{k: "given" for k in mine}}
    if args.json:
        print_json({**estimate_view(est, gpus), "preset": got.to_dict(), "origins": origins}, out)
        return 0
    settings = est.settings.to_dict()
    print_table(est, req.label, gpus, out)
    out.write("\n")
    write_wrapped(out, f"preset {got.preset} {preset(name).release}: {preset(name).summary}")
    for line in preset_lines(got, settings, origins):
        out.write(line + "\n")
    return 0


def _peak_line(est: Estimate) -> str | None:
    """Under a profile with phases: what the components table holds (what is alive at the peak phase)."""
    phase = est.peak_phase
    if not phase:
        return None
    comps = est.components()
    alive = [c for c in COMPONENTS if comps[c] and c != "overhead"]
    absent = [c for c in COMPONENTS if not comps[c] and c != "overhead"]
    line = f"the table is what is alive at the peak, in the {phase} phase: {', '.join(alive) or 'nothing'}"
    if comps.get("overhead"):
        held = ("the allocator's reserve, CUDA context and NCCL's buffers" if est.figures.get("nccl")
                else "the allocator's reserve and CUDA context")
        line += f" (and {held} as overhead)"
    notes = []
    for c in absent:
        why = est.profile_data.absent_reason(c, phase)
        notes.append(f"{c} 0" + (f": {why}" if why else ""))
    return line + ("; " + "; ".join(notes) if notes else "")


def _component_rows(rows: list, total: int, out) -> None:
    width = max(len(c) for c, _ in rows + [("component", 0)])
    out.write(f"{'component':<{width}}  {'GiB':>9}  {'share':>7}\n")
    for name, value in rows:
        share = value / total if total else 0.0
        out.write(f"{name:<{width}}  {gib(value):>9}  {100 * share:>6.1f}%  {bar(share, out)}".rstrip() + "\n")
    out.write(f"{'total':<{width}}  {gib(total):>9}  {100.0:>6.1f}%\n\n")


def print_table(est: Estimate, model: str, gpus: Sequence[int], out, note: str | None = None) -> None:
    out.write(f"{model}\n")
    out.write(family_line(est) + "\n")
    text = est.profile_data.summary
    if text:
        write_wrapped(out, f"profile {est.profile}: {text}")
    out.write(f"parameters: {count(est.params_total)} total, {count(est.params_trainable)} trainable\n\n")
    split = inference_split(est)
    if split is not None:
        _component_rows([("weights", split.weights), ("KV cache", split.kv_cache), ("overhead", split.overhead)],
                        split.total, out)
        out.write(f"KV cache for batch {est.settings.batch_size} x {est.settings.seq_len} tokens: "
                  f"{gib(split.kv_cache)} GiB; the total is weights + KV cache + overhead\n")
        out.write(f"reference: the unsloth inference rule (weights plus a fixed headroom, no KV cache) gives "
                  f"{gib(split.rule_total)} GiB\n")
        out.write(f"minimum per GPU (weights and KV cache split over the GPUs, {gib(split.overhead)} GiB of "
                  "overhead on each): " + ", ".join(f"{n} x {gib(split.per_gpu(n))} GiB" for n in gpus) + "\n")
    else:
        _component_rows([(c, getattr(est, c)) for c in COMPONENTS], est.total, out)
        if est.phases:
            out.write("phases (tensor bytes at each peak): " + ", ".join(
                f"{k} {gib(v)} GiB" for k, v in est.phases.items()) + f"; the peak is in the {est.peak_phase} phase\n")
            peak = _peak_line(est)
            if peak:
                write_wrapped(out, peak)
        for line in report_lines(est, gib):
            out.write(line.rstrip("\n") + "\n")
        if est.strategy is not None:
            _strategy_lines(est, out)
        else:
            _per_gpu_lines(est, gpus, out)
    for line in est.error_band.lines():
        write_wrapped(out, line)
    if note:
        write_wrapped(out, note)
    for w in est.warnings:
        write_wrapped(out, f"warning: {w}")


def _gpus(n: int) -> str:
    return f"{n} GPU{'s' if n > 1 else ''}"


def _per_gpu_lines(est: Estimate, gpus: Sequence[int], out) -> None:
    """Without a strategy: what each GPU holds under each strategy the profile models, one row per
    strategy and a column per GPU count (``*`` the least of the count), the refusals, and the profile's
    split rule where it is kept (:func:`~vramwise.answers.placement.per_gpu_by_strategy`)."""
    answer = per_gpu_by_strategy(est, gpus)
    s = est.settings
    if answer.strategies:
        write_wrapped(out, f"per GPU by strategy, GiB (batch {s.batch_size} x {s.seq_len} per rank; * the least, a tie "
                           "to the first listed):")
        names = ["strategy", *answer.strategies]
        width = max(map(len, names))
        best = dict(answer.best)
        cols = []
        for n in answer.counts:
            cells = [_gpus(n) + " "] + [("refused " if c.per_gpu is None else gib(c.per_gpu) + ("*" if best[n] == c.strategy else " "))
                                        for c in (answer.cell(st, n) for st in answer.strategies)]
            w = max(map(len, cells))
            cols.append([x.rjust(w) for x in cells])
        for i, name in enumerate(names):
            out.write(f"{name:<{width}}" + "".join("  " + col[i] for col in cols).rstrip() + "\n")
        refusals: dict = {}
        for c in answer.cells:
            if c.refused is not None:
                refusals.setdefault((c.strategy, c.refused), []).append(c.count)
        for (strategy, why), counts in refusals.items():
            write_wrapped(out, f"refused: {strategy} on {_counts(counts)}: {why}")
        bests: dict = {}
        for n, name in answer.best:
            if name is not None:
                bests.setdefault(name, []).append(n)
        write_wrapped(out, "best (least per GPU): " + ("; ".join(f"{name} on {_counts(ns)}" for name, ns in bests.items())
                                                       or "none, every strategy refuses these settings"))
    if answer.split_rule:
        text = answer.split_rule_text.rstrip(".")
        text = text[:1].lower() + text[1:] if text[1:2].islower() else text
        write_wrapped(out, "per GPU by the profile's split rule (no strategy): "
                      + ", ".join(f"{n} x {gib(b)} GiB" for n, b in answer.split_rule) + (f"; the rule: {text}" if text else ""))


def _counts(counts: Sequence[int]) -> str:
    """``1 GPU``, ``2, 4 and 8 GPUs``."""
    words = [str(n) for n in counts]
    listed = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
    return listed + (" GPU" if list(counts) == [1] else " GPUs")


def _strategy_lines(est: Estimate, out) -> None:
    """What a multi-GPU strategy puts on each GPU and in host memory (the table above is the busiest rank)."""
    s = est.settings
    info = est.strategy_info
    write_wrapped(out, f"strategy {est.strategy} on {est.world_size} GPU{'s' if est.world_size > 1 else ''}: "
                       f"{info['summary']}; the table is one rank (GPU), batch {s.batch_size} x {s.seq_len} per rank")
    for r in est.per_rank:
        out.write(f"per rank: {r.count} x {gib(r.total)} GiB ({r.role})\n")
    f = est.figures
    parts = [f"model states {gib(f['model_states'])} GiB"]
    if f.get("in_flight"):
        parts.append(f"gathered at the peak {gib(f['in_flight'])} GiB")
    if f.get("buffers"):
        parts.append(f"communication buffers {gib(f['buffers'])} GiB")
    if f.get("nccl"):
        parts.append(f"NCCL's buffers {gib(f['nccl'])} GiB (outside torch's allocator)")
    out.write("on each GPU: " + ", ".join(parts) + "\n")
    host = est.host_bytes
    notes = ([f"offload {s.offload}"] if s.offload != "none" else []) + ([info["host_note"]] if info.get("host_note") else [])
    write_wrapped(out, f"host memory per machine ({gpus_word(min(est.world_size, s.gpus_per_node))}): {gib(host)} GiB"
                  + (f" ({'; '.join(notes)})" if notes else ""))
