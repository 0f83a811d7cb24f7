"""Speed of vramwise, in one run.

    python benchmarks/bench_estimate.py [CONFIG] [--quick]

- estimate from a fresh config dict (a new dict object each call, equal content), from a
  path, and from a resolved ``ModelSpec``, for both profiles and for the hf profile with FSDP on
  8 GPUs; batch and sequence length
  change on every call (the other settings cycle through a grid);
- ``load_model`` of the config at 32, 3,200, 32,000 and 1,000,000 layers, and with a
  ``layer_types`` list of 1,000,000 entries (each on a fresh registry cache, so the
  model is really resolved);
- the wall time of ``vramwise estimate CONFIG`` in a fresh process (which must not import torch),
  with the package's bytecode cached as an installed package has it.

Medians over many calls; the machine is shared, so figures vary between runs.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
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


def _grid():
    """Settings for successive calls: batch and sequence change every call, the rest every 12 calls."""
    others = itertools.cycle(
        dict(method=m, lora_rank=r, gradient_checkpointing=g)
        for m in ("qlora", "lora", "full") for r in (8, 16, 64) for g in ("none", "true", "unsloth")
    )
    shapes = list(itertools.product((1, 2, 4, 8), (512, 2048, 8192)))
    while True:
        rest = next(others)
        for b, s in shapes:
            yield dict(rest, batch_size=b, seq_len=s)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quick = "--quick" in sys.argv
    path = Path(args[0]) if args else DEFAULT
    cfg = json.loads(path.read_text())
    n = 2000 if quick else 20000
    reg = vramwise.Registry()
    spec = vramwise.load_model(cfg, registry=reg)
    rows = []
    # the two profiles, and the hf profile with FSDP on 8 GPUs (a strategy's formulas on top of the profile's)
    for label, profile, extra in (("unsloth", "unsloth", {}), ("hf", "hf", {}),
                                  ("hf+fsdp", "hf", dict(strategy="fsdp", world_size=8))):
        grid = _grid()
        for _ in range(500):  # warm up: every static stage of the grid is built once
            vramwise.estimate(spec, registry=reg, profile=profile, **extra, **next(grid))
        spec_us = _median_us(lambda: vramwise.estimate(spec, registry=reg, profile=profile, **extra, **next(grid)), n)
        copies = [copy.deepcopy(cfg) for _ in range(n)]
        it = iter(copies)
        dict_us = _median_us(lambda: vramwise.estimate(next(it), registry=reg, profile=profile, **extra, **next(grid)), n)
        path_us = _median_us(lambda: vramwise.estimate(str(path), registry=reg, profile=profile, **extra, **next(grid)), n)
        rows.append((label, dict_us, path_us, spec_us))

    loads = []
    layer_counts = (32, 3_200, 32_000, 1_000_000)
    for layers in layer_counts:
        big = dict(cfg, num_hidden_layers=layers)
        times = []
        for _ in range(5 if layers < 1_000_000 else 3):
            reg.clear_caches()
            t0 = time.perf_counter()
            vramwise.load_model(big, registry=reg)
            times.append(time.perf_counter() - t0)
        loads.append((f"{layers:,} layers", statistics.median(times) * 1e3))
    listed = dict(cfg, num_hidden_layers=1_000_000, sliding_window=4096,
                  layer_types=["sliding_attention", "full_attention"] * 500_000)
    times = []
    for _ in range(3):
        reg.clear_caches()
        t0 = time.perf_counter()
        vramwise.load_model(listed, registry=reg)
        times.append(time.perf_counter() - t0)
    loads.append(("1,000,000-entry layer_types", statistics.median(times) * 1e3))

    # bytecode is cached, as after `pip install` (which compiles it); the first call writes it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    runs = []
    for k in range(1 + (5 if quick else 11)):
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c",
             "import sys; from vramwise.cli import main; rc = main(sys.argv[1:]);"
             "sys.exit(rc if 'torch' not in sys.modules else 99)", "estimate", str(path)],
            capture_output=True, text=True, env=env,
        )
        if k:
            runs.append(time.perf_counter() - t0)
        if proc.returncode:
            raise SystemExit(f"CLI failed ({proc.returncode}): {proc.stderr}")

    print(f"config: {path.name}; medians over {n:,} estimates (batch and sequence changed on every call)")
    print(f"{'profile':<10}{'fresh dict':>14}{'path':>12}{'ModelSpec':>13}")
    for profile, d, p, s in rows:
        print(f"{profile:<10}{d:>11.1f} us{p:>9.1f} us{s:>10.1f} us")
    for label, ms in loads:
        print(f"load_model, {label + ':':<30}{ms:>10.2f} ms")
    print(f"CLI `vramwise estimate` (fresh process), median of {len(runs)}: {statistics.median(runs) * 1e3:.1f} ms "
          "(torch not imported)")


if __name__ == "__main__":
    main()
