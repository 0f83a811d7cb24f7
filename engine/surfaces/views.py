"""The JSON views of estimate, explain and families: what ``vramwise estimate|explain|families --json``
print and what the server's ``/api/estimate``, ``/api/explain`` and ``/api/families`` answer.

Both surfaces build them here, so the two cannot drift apart. A view only arranges what the library
computed: the per-GPU figures come from :mod:`vramwise.answers.placement`.
"""

from __future__ import annotations

from typing import Sequence

from vramwise.answers.placement import inference_split, per_gpu_bytes, per_gpu_by_strategy
from vramwise.estimation.estimate import Estimate
from vramwise.estimation.registry import Registry
from vramwise.rules.expr.language import render

__all__ = ["estimate_view", "explain_view", "families_view", "strategy_gpus_problem", "report_lines", "count",
           "count_bytes"]

GIB = 1024**3


def count(n: int) -> str:
    """``8.03 B``, ``350.00 M``, ``1.50 K`` or the number itself."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return str(n)


def count_bytes(n: int) -> str:
    """``1.50 GiB`` from one GiB up, else the bytes (``512 bytes``)."""
    return f"{n / GIB:,.2f} GiB" if n >= GIB else f"{n:,} bytes"


def report_lines(est: Estimate, gib) -> list[str]:
    """The profile's report lines for ``est`` (profile data: ``report``), its figures written with
    ``gib(bytes)`` (ratios with two decimals, counts whole) and the run's batch and sequence length."""
    prof = est.profile_data
    values = {"batch_size": str(est.settings.batch_size), "seq_len": str(est.settings.seq_len)}
    units = prof.figure_units
    values.update((name, gib(v) if units.get(name, "bytes") == "bytes" else (f"{v:,.2f}" if units[name] == "ratio" else f"{v:,}"))
                  for name, v in est.figures.items())
    method = est.settings.method
    figures = est.figures
    return [render(text, values) for text, methods, when in prof.report
            if (methods is None or method in methods) and (when is None or when.evaluate(figures))]


def strategy_gpus_problem(strategy, gpus: Sequence[int], world_size, *, names: tuple, example: str) -> str | None:
    """Why ``gpus`` (the GPU counts an estimate is shown for) cannot stand for the world size of
    ``strategy``, which it is under a strategy; None when it can. ``world_size``: the one given beside it
    (None: none); ``names``: the strategy's, the GPU counts' and the world size's fields as the caller's users
    write them (``--strategy``, ``--gpus``, ``--world-size``, or the API's names)."""
    strategy_name, gpus_name, world_size_name = names
    if len(gpus) != 1:
        return (f"with {strategy_name} {strategy}, {gpus_name} is the number of GPUs it runs on: give one number "
                f"({example}), or {world_size_name}")
    if world_size is not None and world_size != gpus[0]:
        return (f"{gpus_name} {gpus[0]} and {world_size_name} {world_size} disagree: with a strategy both are the "
                "number of GPUs it runs on; give one of them")
    return None


def estimate_view(est: Estimate, gpus: Sequence[int]) -> dict:
    """``estimate --json``: the estimate, and ``min_per_gpu`` for each GPU count of ``gpus`` (a
    strategy: its own world size only). Inference with a KV cache also carries the profile's
    per-GPU rule (``min_per_gpu_rule``), the total with the KV cache (``inference_total``) and the
    overhead inside that total (``inference_overhead``). A training estimate carries
    ``per_gpu_by_strategy``: for the same GPU counts, each multi-GPU strategy's bytes per GPU or its
    refusal, the best of each count, and the profile's split rule where it is kept
    (:meth:`~vramwise.answers.placement.PerGpuByStrategy.to_dict`)."""
    data = est.to_dict()
    per_gpu = per_gpu_bytes(est, gpus)
    data["min_per_gpu"] = {str(n): b for n, b in per_gpu.items()}
    if est.serving is None:
        data["per_gpu_by_strategy"] = per_gpu_by_strategy(est, per_gpu).to_dict()
    split = inference_split(est)
    if split is not None:  # min_per_gpu holds the KV cache; the profile's own per-GPU rule beside it
        data["min_per_gpu_rule"] = {str(n): est.min_per_gpu(n) for n in gpus}
        data["inference_total"] = split.total
        data["inference_overhead"] = split.overhead
    return data


def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def explain_view(est: Estimate) -> dict:
    """``explain --json``: the estimate, every input's provenance and every formula."""
    return {
        "estimate": est.to_dict(),
        "provenance": [
            {
                "kind": p.kind, "name": p.name, "value": _jsonable(p.value), "unit": p.unit,
                "location": p.location(), "how": p.how,
                **({"layers": list(p.layer_indices)} if p.layer_indices is not None else {}),
            }
            for p in est.provenance
        ],
        "trace": [
            {
                "id": t.id, "component": t.component, "location": t.location(), "expression": t.expression,
                "inputs": {k: _jsonable(v) for k, v in t.inputs.items()}, "value": _jsonable(t.value),
                "unit": t.unit, "source": t.source,
                **({"layers": list(t.layer_indices)} if t.layer_indices is not None else {}),
            }
            for t in est.trace
        ],
    }


def families_view(registry: Registry | None = None) -> dict:
    """``families --json``: the families (not the abstract ones), the profiles and their summaries."""
    reg = registry or Registry.default()
    rows = [
        {"family": f.name, "model_types": list(f.model_types), "file": f.file, "extends": f.parents[0] if f.parents else None,
         "fallback": f.fallback}
        for f in sorted(reg.families.values(), key=lambda f: f.name) if not f.abstract
    ]
    return {"families": rows, "profiles": reg.profile_names(),
            "profile_summaries": {p: reg.profile(p).summary for p in reg.profile_names()}}
