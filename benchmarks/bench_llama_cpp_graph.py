"""Speed of the llama.cpp profile's simulated compute buffer (formulas/llama.cpp/compute.yaml ``graph``), in one run.

    python benchmarks/bench_llama_cpp_graph.py [--calls N]

- the graph value of a Llama-3-70B-sized model (80 layers, 8,192 wide, 64 heads of 128, 8 KV heads, FFN 28,672,
  128,256 tokens) under llama.cpp's default context settings: both reserved graphs built and placed by ggml-alloc's
  simulation (the deep graph placed with 8 or 9 layers where that is the same, vramwise.profiles.graphs);
- the same graph with every layer placed (the shortcut off), for scale;
- a whole ``vramwise.estimate`` of a small GGUF file (the reference fixture's llama-gqa-F16, a new n_ctx each call) with ``--profile llama.cpp`` on the CPU (n_gpu_layers 0), the
  graph included.

Medians over the calls; the machine is shared, so figures vary between runs. No figure is asserted: the tests
check what is correct whatever the speed (tests/unit/profiles/test_llama_cpp_compute_graph.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import vramwise
from vramwise.profiles.ggml_alloc import graph_extent
from vramwise.profiles.graphs import _build

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "unit" / "profiles"))

from test_llama_cpp_reference import CASES, FILES, write_header  # noqa: E402

#: Llama-3-70B's dimensions (its config.json), read by the llama template
SEVENTY_B = dict(num_layers=80, hidden_size=8192, num_attention_heads=64, head_dim=128, cb_kv_dim=1024,
                 intermediate_size=28672, stored_vocab_tokens=128256)


def _median_ms(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=30, help="calls a figure (default 30)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "llama-gqa-F16.gguf"
        write_header(path, FILES["llama-gqa-F16"])
        settings = CASES[0]["settings"]
        e = vramwise.estimate(str(path), profile="llama.cpp", n_gpu_layers=0, **settings)
        entry = next(f for f in e.trace if f.id == "cb_graph_bytes")
        expr = vramwise.Registry().profile("llama.cpp").formula("cb_graph_bytes").expr
        env = dict(entry.inputs, **SEVENTY_B)
        (template,) = [t for t in expr.templates if env["model_type"] in t.model_types]
        bounds = [tuple(x.evaluate(env) for x in r) for r in expr.reserves]

        def every_layer():
            return max(graph_extent(_build(template, env, b, SEVENTY_B["num_layers"], "num_layers")[0])
                       for b in bounds)

        value = expr.evaluate(env)
        same = value == every_layer()  # the shortcut places the same graph, it is no approximation
        graph_ms = _median_ms(lambda: expr.evaluate(env), args.calls)
        full_ms = _median_ms(every_layer, max(3, args.calls // 10))
        contexts = iter(range(1024, 1 << 30, 256))  # a new n_ctx each call: no estimate is served from a cache
        est_ms = _median_ms(lambda: vramwise.estimate(str(path), profile="llama.cpp", n_gpu_layers=0,
                                                      **{**settings, "n_ctx": next(contexts)}), args.calls)
    print(f"80-layer graph (Llama-3-70B-sized, {value:,} bytes), both reserves, median of {args.calls}: "
          f"{graph_ms:.2f} ms")
    print(f"the same with every layer placed, median of {max(3, args.calls // 10)}: {full_ms:.2f} ms "
          f"({'the same extent' if same else 'A DIFFERENT EXTENT'})")
    print(f"vramwise.estimate of the reference fixture's llama-gqa GGUF, llama.cpp profile on the CPU, median of {args.calls}: "
          f"{est_ms:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
