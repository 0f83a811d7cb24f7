"""What ``fit`` prints under a local-inference profile (``--profile llama.cpp``, or a runtime preset such as
``--preset ollama``): the verdict on the GPU, the largest context, the layers to offload, the parallel sequences
and the host memory, with each setting's origin where a preset gave it."""

from __future__ import annotations

from vramwise.surfaces.cli.format import family_line, gib, summary, write_wrapped

__all__ = ["print_local_fit", "preset_lines"]


def _companions_text(fig, gpus: int) -> str:
    """What the totals hold of a draft model and a projector, per device (empty without them)."""
    parts = []
    if fig.get("draft_weights"):
        on_gpus = [fig[f"draft_gpu{g}"] for g in range(8)]
        shown = (f"GPU {gib(sum(on_gpus))} GiB" if gpus == 1 else
                 ", ".join(f"GPU {g} {gib(on_gpus[g])} GiB" for g in range(gpus)))
        parts.append(f"the draft model's weights, KV cache and output buffer ({shown}, host "
                     f"{gib(fig['draft_host'])} GiB; its compute buffer not counted)")
    if fig.get("mmproj_weights"):
        where = "GPU 0" if fig["gpu_mmproj"] else "the host"
        parts.append(f"the projector's weights ({gib(fig['mmproj_weights'])} GiB on {where}; its compute buffer not "
                     "counted)")
    return f"these totals hold {' and '.join(parts)}" if parts else ""


def _layers_text(f, k: int) -> str:
    if k <= 0:
        return "0 (nothing fits on the GPU: the model runs from the host)"
    if k >= f.layers + 1:
        return f"all ({k}: the {f.layers} layers and the output layer)"
    last = "only the output layer" if k == 1 else "the last layer and the output layer" if k == 2 else \
        f"the last {k - 1} layers and the output layer"
    return f"{k} of {f.layers + 1} ({last})"


def preset_lines(got, settings, origins) -> list[str]:
    """The settings a preset gave (``got``: a :class:`~vramwise.inputs.presets.PresetSettings`) as a table, each
    value as the estimate took it (``settings``) with its origin (``origins``), then the runtime's own options."""
    width = max(len(n) for n in origins)
    lines = ["settings (origin):"]
    for name, origin in origins.items():
        value = settings.get(name)
        shown = "all" if value is None and name == "n_gpu_layers" else str(value).lower() if isinstance(value, bool) \
            else f"{value}"
        lines.append(f"  {name:<{width}}  {shown:<10} {origin}")
    options = ", ".join(f"{n} {v!r}" if isinstance(v, str) else f"{n} {v}" for n, v, _ in got.options)
    lines.append(f"  ({got.preset} options: {options})")
    return lines


def print_local_fit(f, label: str, out, gpu_lines: list) -> None:
    """The answers of ``f`` (a :class:`~vramwise.answers.offload.LocalFit`) under ``label``; ``gpu_lines``: the GPU
    in words (fit's lines)."""
    est, fig, s = f.estimate, f.estimate.figures, f.estimate.settings
    out.write(f"{label}\n")
    out.write(family_line(est) + "\n")
    text = summary(f.profile)
    if text:
        write_wrapped(out, f"profile {f.profile}: {text}")
    if f.preset is not None:
        from vramwise.inputs.presets import preset

        p = preset(f.preset.preset)
        write_wrapped(out, f"preset {p.name} {p.release}: {p.summary}")
    for line in gpu_lines:
        write_wrapped(out, line)
    if f.origins is not None:
        out.write("\n")
        for line in preset_lines(f.preset, f.settings, f.origins):
            out.write(line + "\n")
    out.write("\n")
    write_wrapped(out, f"at these settings (n_ctx {fig['n_ctx']:,}, {fig['n_ctx_seq']:,} per sequence, "
                       f"n_parallel {s.n_parallel}, {fig['offloaded_layers']} of {f.layers} layers offloaded): "
                       + (f"GPU {gib(fig['gpu_total'])} GiB" if f.gpus == 1 else  # over several GPUs, each must fit
                          ", ".join(f"GPU {g} {gib(t)} GiB" for g, t in enumerate(f.per_gpu)))
                       + f", host {gib(fig['host_total'])} GiB: {f.verdict.head()}")
    companions = _companions_text(fig, f.gpus)
    if companions:
        write_wrapped(out, companions)
    out.write("\n")
    if f.max_n_ctx is None:
        out.write("largest n_ctx: none (one token of context does not fit beside the weights on the GPU)\n")
    else:
        write_wrapped(out, f"largest n_ctx: {f.max_n_ctx:,} (n_parallel {s.n_parallel}, cache {s.cache_type_k}/"
                           f"{s.cache_type_v}, n_gpu_layers {'all' if s.n_gpu_layers is None else s.n_gpu_layers})")
    for note in f.notes:
        write_wrapped(out, f"note: {note}")
    write_wrapped(out, f"n_gpu_layers at n_ctx {fig['n_ctx']:,}: {_layers_text(f, f.max_n_gpu_layers)}; GPU "
                       f"{gib(f.gpu_bytes_at_max_layers)} GiB, host {gib(f.host_bytes_at_max_layers)} GiB")
    if f.max_n_parallel is None:
        write_wrapped(out, f"parallel sequences of {f.slot_ctx:,} tokens each: none (one does not fit)")
    else:
        write_wrapped(out, f"parallel sequences of {f.slot_ctx:,} tokens each: {f.max_n_parallel:,} (n_parallel "
                           f"{f.max_n_parallel:,} with n_ctx {f.slot_ctx * f.max_n_parallel:,})")
    if f.in_preset_names:
        shown = ", ".join(f"{n} {v}" for n, v in f.in_preset_names)
        write_wrapped(out, f"the answers as {f.preset.preset} options: {shown}")
    for w in est.warnings:
        write_wrapped(out, f"warning: {w}")
