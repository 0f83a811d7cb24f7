"""The compute buffers of published llama.cpp load logs (benchmarks/llama_cpp_logs.yaml), set beside the graph's
largest tensors, as data: the llama.cpp profile does not model the compute buffer.

For each run the terms are computed from the log's hparams and settings (n_kv, the cells the worst-case graph
reserves over, is the whole cache at these builds; n_ub is n_ubatch):

  kq      n_kv x n_ub x n_head x 4 bytes   the attention scores, float32, without flash attention
  mask    n_kv x n_ub x 4 bytes            the KQ mask, float32, built on the host
  logits  n_vocab x n_ub x 4 bytes         the output layer's result, on the device holding the output layer
  hidden  n_embd x n_ub x 4 bytes          one hidden-state tensor of the ubatch

and the remainders: a GPU's (or a CPU-only run's) buffer less max(kq + mask, logits + hidden), and the host's
(CUDA_Host) buffer less mask + hidden. Sources: llama.cpp src/llama-context.cpp (graph_reserve: the worst-case
graph of n_ubatch tokens over the whole cache), src/llama-graph.cpp (build_attn_mha: kq = ggml_mul_mat(k, q),
then ggml_soft_max_ext in place; build_attn_inp_kq_mask: a float32 mask of n_kv x n_tokens), ggml-alloc (a
tensor's memory reused once its last consumer ran).

    python benchmarks/llama_cpp_logs.py [--json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "benchmarks" / "llama_cpp_logs.yaml"
MIB = 1024 * 1024
HOST = {"CPU", "CUDA_Host", "ROCm_Host", "Vulkan_Host"}


def entries() -> list[dict]:
    return yaml.safe_load(FIXTURE.read_text(encoding="utf-8"))["entries"]


def terms(run: dict) -> dict:
    """The graph's largest tensors for the run, in bytes."""
    m, s, obs = run["model"], run["settings"], run["observed"]
    n_kv = obs.get("kv_cells", s["n_ctx"])
    n_ub = min(s["n_ubatch"], s["n_batch"])
    flash = s["flash_attn"] == "on"
    return {
        "n_kv": n_kv,
        "n_ubatch": n_ub,
        "kq": 0 if flash else n_kv * n_ub * m["n_head"] * 4,
        "mask": n_kv * n_ub * 4,
        "logits": m["n_vocab"] * n_ub * 4,
        "hidden": m["n_embd"] * n_ub * 4,
    }


def rows() -> list[dict]:
    """One row per run with a compute buffer: its settings, the terms in MiB and the remainders."""
    out = []
    for run in entries():
        compute = run["observed"]["compute_mib"]
        if not compute:
            continue
        t = terms(run)
        devices = {d: mib for d, mib in compute.items() if d not in HOST}
        host = {d: mib for d, mib in compute.items() if d in HOST and d != "CPU"}
        if not devices:  # a CPU-only run: its one buffer holds the whole graph
            devices = {d: mib for d, mib in compute.items() if d == "CPU"}
        peak = max(t["kq"] + t["mask"], t["logits"] + t["hidden"]) / MIB
        row = {
            "id": run["id"],
            "n_kv": t["n_kv"],
            "n_ubatch": t["n_ubatch"],
            "flash_attn": run["settings"]["flash_attn"],
            "n_head": run["model"]["n_head"],
            "n_embd": run["model"]["n_embd"],
            "n_vocab": run["model"]["n_vocab"],
            "compute_mib": compute,
            **{f"{k}_mib": round(v / MIB, 2) for k, v in t.items() if k not in ("n_kv", "n_ubatch")},
            # one device: the remainder past the larger of the attention and output peaks; several devices
            # (pipeline parallelism, the output layer on the last one) are listed, not reduced
            "device_remainder_mib": round(next(iter(devices.values())) - peak, 2) if len(devices) == 1 else None,
            "host_remainder_mib": round(sum(host.values()) - (t["mask"] + t["hidden"]) / MIB, 2) if host else None,
        }
        out.append(row)
    return out


def table(rs: list[dict]) -> str:
    head = ("| run | n_kv | n_ub | FA | n_head | compute (MiB) | kq | mask | logits | hidden | device rest "
            "| host rest |\n|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rs:
        compute = ", ".join(f"{d} {mib:.2f}" for d, mib in r["compute_mib"].items())
        rest = lambda v: "" if v is None else f"{v:.2f}"  # noqa: E731
        lines.append(f"| {r['id']} | {r['n_kv']} | {r['n_ubatch']} | {r['flash_attn']} | {r['n_head']} | {compute} "
                     f"| {r['kq_mib']:.2f} | {r['mask_mib']:.2f} | {r['logits_mib']:.2f} | {r['hidden_mib']:.2f} "
                     f"| {rest(r['device_remainder_mib'])} | {rest(r['host_remainder_mib'])} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    rs = rows()
    sys.stdout.write((json.dumps(rs, indent=1) if "--json" in argv else table(rs)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
