"""The vllm profile against published vLLM start-up logs (benchmarks/vllm_logs.yaml).

For every logged run whose model config is in the shared config corpus (../shared/configs), the
estimate at the run's settings (vLLM's defaults for what the log does not state) is compared with
what vLLM printed: the KV-cache tokens ("GPU KV cache size"), the available KV-cache memory, the
weights, the profiling peak, and whether it started. Prints a Markdown table and the summary
(median error per group of logs, refusals predicted as refusals); ``--json`` prints the rows.

    python benchmarks/serving.py [--json]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "benchmarks" / "vllm_logs.yaml"
SHARED = REPO.parent / "shared" / "configs"
GIB = 2**30


def entries() -> list[dict]:
    return yaml.safe_load(FIXTURE.read_text(encoding="utf-8"))["entries"]


def config_of(entry: dict) -> dict | None:
    path = SHARED / entry["config"]
    if not path.is_file():
        return None
    config = json.loads(path.read_text(encoding="utf-8"))
    if "quantization_config" in entry:
        config = {**config, "quantization_config": entry["quantization_config"]}
    return config


def predict(entry: dict, config: dict) -> dict:
    import vramwise

    est = vramwise.estimate(config, profile="vllm", method="inference", vllm_version=entry["vllm_version"],
                            gpu_memory=round(entry["gpu_memory_gib"] * GIB), **entry["settings"])
    return est.figures


def rows() -> list[dict]:
    out = []
    for e in entries():
        config = config_of(e)
        if config is None:
            continue
        f = predict(e, config)
        o = e["observed"]
        row = {"id": e["id"], "group": e["group"], "model": e["model"], "vllm": e["vllm_version"],
               "tp": e["settings"].get("tensor_parallel_size", 1), "pp": e["settings"].get("pipeline_parallel_size", 1),
               "started": o["started"], "refusal": o.get("refusal"), "predicted_start": bool(f["starts"]),
               "kv_tokens": o.get("kv_tokens"), "predicted_kv_tokens": f["kv_cache_tokens"],
               "available_kv_gib": o.get("available_kv_gib"), "predicted_available_kv_gib": f["available_kv"] / GIB,
               "weights_gib": o.get("weights_gib"), "predicted_weights_gib": f["weights"] / GIB,
               "activation_peak_gib": o.get("activation_peak_gib"), "predicted_activation_peak_gib": f["activation_peak"] / GIB}
        row["kv_error"] = (row["predicted_kv_tokens"] / row["kv_tokens"] - 1) if row["kv_tokens"] else None
        out.append(row)
    return out


def summary(table: list[dict]) -> dict:
    groups: dict = {}
    for r in table:
        if r["kv_error"] is not None and r["started"]:
            groups.setdefault(r["group"], []).append(abs(r["kv_error"]))
    every = [x for v in groups.values() for x in v]
    kv_refusals = [r for r in table if r["refusal"] == "kv_check"]
    starts = [r for r in table if r["started"]]
    return {
        "logs": len(table),
        "median_kv_error": statistics.median(every) if every else None,
        "largest_kv_error": max(every) if every else None,
        "median_kv_error_by_group": {g: statistics.median(v) for g, v in sorted(groups.items())},
        "kv_refusals": len(kv_refusals),
        "kv_refusals_predicted": sum(1 for r in kv_refusals if not r["predicted_start"]),
        "starts": len(starts),
        "starts_predicted": sum(1 for r in starts if r["predicted_start"]),
    }


def _pct(x):
    return "" if x is None else f"{100 * x:+.1f} %"


def _num(x, fmt="{:,.2f}"):
    return "" if x is None else fmt.format(x)


def markdown(table: list[dict], s: dict) -> str:
    lines = ["| log | vLLM | TP/PP | started | predicted | KV tokens | predicted | error | available GiB | predicted |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|"]
    for r in table:
        lines.append(f"| {r['id']} | {r['vllm']} | {r['tp']}/{r['pp']} | {'yes' if r['started'] else 'no (' + str(r['refusal']) + ')'} "
                     f"| {'yes' if r['predicted_start'] else 'no'} | {_num(r['kv_tokens'], '{:,}')} | {r['predicted_kv_tokens']:,} "
                     f"| {_pct(r['kv_error'])} | {_num(r['available_kv_gib'])} | {r['predicted_available_kv_gib']:.2f} |")
    lines.append("")
    lines.append(f"{s['logs']} logs; KV-cache tokens: median error {_pct(s['median_kv_error'])}, largest {_pct(s['largest_kv_error'])}; "
                 + "; ".join(f"{g}: median {_pct(v)}" for g, v in s["median_kv_error_by_group"].items())
                 + f". Refusals by the KV-cache check predicted: {s['kv_refusals_predicted']} of {s['kv_refusals']}; "
                 f"starts predicted: {s['starts_predicted']} of {s['starts']}.")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not SHARED.is_dir():
        print(f"the shared config corpus ({SHARED}) is not here", file=sys.stderr)
        return 1
    table = rows()
    s = summary(table)
    if "--json" in argv:
        print(json.dumps({"rows": table, "summary": s}, indent=1))
    else:
        print(markdown(table, s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
