"""What ``estimate`` and ``fit`` print under a serving profile (``--profile vllm``): the budget in the
server's own terms, so that it can be held beside the server's start-up log."""

from __future__ import annotations

from vramwise.estimation.estimate import Estimate
from vramwise.surfaces.cli.format import bar, count, gib, write_wrapped
from vramwise.surfaces.views import report_lines

__all__ = ["print_serving_estimate", "print_serving_fit"]


def _budget_rows(est: Estimate, out) -> None:
    f = est.figures
    rows = [("weights", f["weights"]), ("profiling peak", f["activation_peak"]),
            ("outside torch + CUDA graphs", f["non_torch"] + f["cuda_graphs"]), ("KV cache", f["kv_cache_bytes"])]
    total = sum(v for _, v in rows)
    width = max(len(n) for n, _ in rows)
    out.write(f"{'per GPU':<{width}}  {'GiB':>9}  {'share':>7}\n")
    for name, value in rows:
        share = value / f["gpu_memory"] if f["gpu_memory"] else 0.0
        out.write(f"{name:<{width}}  {gib(value):>9}  {100 * share:>6.1f}%  {bar(share, out)}".rstrip() + "\n")
    out.write(f"{'total':<{width}}  {gib(total):>9}  {100 * total / f['gpu_memory']:>6.1f}%  of the GPU's "
              f"{gib(f['gpu_memory'])} GiB\n\n")


def _start_line(est: Estimate) -> str:
    f, s = est.figures, est.serving
    if s["starts"]:
        return (f"vLLM starts: yes; {f['kv_cache_tokens']:,} tokens of KV cache hold {s['max_concurrency']:.2f} requests of "
                f"{f['max_model_len']:,} tokens at once")
    if f["available_kv"] <= 0:
        why = ("no memory is left for the KV cache (\"No available memory for the cache blocks\"): raise "
               "--gpu-memory-utilization, or spread the model with --tensor-parallel-size")
    elif f["needed_kv"] > f["available_kv"]:
        longest = s["largest_max_model_len"]
        why = (f"one request of {f['max_model_len']:,} tokens needs {gib(f['needed_kv'])} GiB of KV cache, more than the "
               f"{gib(f['available_kv'])} GiB available" + (f"; the largest max_model_len that starts is {longest:,}"
                                                             if longest else ""))
    else:
        why = "max_model_len is longer than the model's own context (see the warning)"
    return f"vLLM starts: no: {why}"


def _family_line(est: Estimate) -> str:
    fmt = est.model.checkpoint_format
    return (f"family {est.family} ({est.model_type}), profile {est.profile}; serving, "
            + (f"{fmt} checkpoint" if fmt else "16-bit weights"))


def print_serving_estimate(est: Estimate, model: str, out) -> None:
    s = est.settings
    out.write(f"{model}\n")
    out.write(_family_line(est) + "\n")
    text = est.profile_data.summary
    if text:
        write_wrapped(out, f"profile {est.profile}: {text}")
    out.write(f"parameters: {count(est.params_total)}; vLLM {s.vllm_version}"
              + (f" on {s.gpu}" if s.gpu else "") + f", tensor_parallel_size {s.tensor_parallel_size}, "
              f"pipeline_parallel_size {s.pipeline_parallel_size}\n\n")
    _budget_rows(est, out)
    write_wrapped(out, "as vLLM logs it (per GPU):")
    for line in report_lines(est, gib):
        out.write("  " + line.rstrip("\n") + "\n")
    write_wrapped(out, _start_line(est))
    for line in est.error_band.lines():
        write_wrapped(out, line)
    for w in est.warnings:
        write_wrapped(out, f"warning: {w}")


def print_serving_fit(f, label: str, out) -> None:
    est = f.estimate
    out.write(f"{label}\n")
    out.write(_family_line(est) + "\n")
    s = est.settings
    out.write(f"GPU: {f.gpu.name}, {gib(f.gpu.memory_bytes)} GiB each; vLLM {s.vllm_version}, tensor_parallel_size "
              f"{s.tensor_parallel_size}, pipeline_parallel_size {s.pipeline_parallel_size}\n")
    spec = f.gpu.matched
    if spec is not None and getattr(spec, "unified", False):  # a unified-memory device: the budget in one line
        from vramwise.inputs.gpu_catalog import unified_budget

        write_wrapped(out, unified_budget(spec).line())
    write_wrapped(out, _start_line(est))
    out.write(f"KV cache: {f.kv_cache_tokens:,} tokens ({gib(est.figures['kv_cache_bytes'])} GiB per GPU)\n")
    out.write("largest max_model_len that starts: "
              + (f"{f.largest_max_model_len:,}" if f.largest_max_model_len else "none") + "\n")
    out.write(f"concurrency at {f.max_model_len:,} tokens: {f.max_concurrency:.2f} requests\n")
    out.write(f"gpu_memory_utilization that {f.max_model_len:,} tokens need: "
              + (f"{f.utilization_needed:.2f}" if f.utilization_needed is not None else "more than 1.00") + "\n")
    out.write("by tensor_parallel_size:\n")
    for tp, tokens, longest, problem in f.by_tp_size:
        if problem:
            out.write(f"  {tp}: {problem}\n")
        else:
            out.write(f"  {tp}: " + (f"{tokens:,} tokens of KV cache" if tokens is not None else "does not start")
                      + (f", largest max_model_len {longest:,}" if longest else "") + "\n")
    for line in est.error_band.lines():
        write_wrapped(out, line)
    for w in est.warnings:
        write_wrapped(out, f"warning: {w}")
