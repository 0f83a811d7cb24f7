"""Speed of vramwise: a warm estimate and one CLI call.

    python benchmarks/bench_estimate.py [CONFIG]

Warm estimate: families and formulas loaded and the model resolved once
(``vramwise.load_model``); each call gets new training settings. Also reported:
an estimate from the config mapping (resolution included) and the wall time of
``vramwise estimate CONFIG`` in a fresh process, which must not import torch.
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import vramwise

HERE = Path(__file__).resolve().parent
DEFAULT = HERE.parent / "examples" / "llama-3.1-8b.json"


def _median_us(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    cfg = json.loads(path.read_text())
    t0 = time.perf_counter()
    reg = vramwise.Registry()
    reg.profile("unsloth")
    load_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    spec = vramwise.load_model(cfg, registry=reg)
    first_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    vramwise.Registry().check_all()
    all_ms = (time.perf_counter() - t0) * 1e3
    grid = itertools.cycle(
        dict(method=m, batch_size=b, seq_len=s, lora_rank=r, gradient_checkpointing=g)
        for m in ("qlora", "lora", "full") for b in (1, 2, 4, 8) for s in (512, 2048, 8192)
        for r in (8, 16, 64) for g in ("none", "true", "unsloth")
    )
    for _ in range(200):  # warm up
        vramwise.estimate(spec, registry=reg, **next(grid))
    warm = _median_us(lambda: vramwise.estimate(spec, registry=reg, **next(grid)), 5000)
    reg.profile("hf")
    for _ in range(200):
        vramwise.estimate(spec, registry=reg, profile="hf", **next(grid))
    warm_hf = _median_us(lambda: vramwise.estimate(spec, registry=reg, profile="hf", **next(grid)), 5000)
    from_mapping = _median_us(lambda: vramwise.estimate(cfg, registry=reg, **next(grid)), 1000)
    runs = []
    for _ in range(7):
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c",
             "import sys; from vramwise.cli import main; rc = main(sys.argv[1:]);"
             "sys.exit(rc if 'torch' not in sys.modules else 99)", "estimate", str(path)],
            capture_output=True, text=True,
        )
        runs.append(time.perf_counter() - t0)
        if proc.returncode:
            raise SystemExit(f"CLI failed ({proc.returncode}): {proc.stderr}")
    print(f"config:                                  {path.name}")
    print(f"registry index + unsloth profile:        {load_ms:8.1f} ms")
    print(f"first model (its family compiled):       {first_ms:8.1f} ms")
    print(f"every family and profile (check_all):    {all_ms:8.1f} ms")
    print(f"warm estimate (resolved model), median:  {warm:8.1f} us")
    print(f"warm estimate, hf profile, median:       {warm_hf:8.1f} us")
    print(f"estimate from config mapping, median:    {from_mapping:8.1f} us")
    print(f"CLI `vramwise estimate`, median of 7:    {statistics.median(runs) * 1e3:8.1f} ms  (torch not imported)")


if __name__ == "__main__":
    main()
