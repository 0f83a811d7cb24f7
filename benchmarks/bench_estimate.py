"""Speed of vramwise, in one run.

    python benchmarks/bench_estimate.py [CONFIG] [--quick]
    python benchmarks/bench_estimate.py --configs [DIR] [--quick]


- estimate from a fresh config dict (a new dict object each call, equal content), from a
  path, and from a resolved ``ModelSpec``, for both profiles and for the hf profile with FSDP on
  8 GPUs; batch and sequence length
  change on every call (the other settings cycle through a grid);
- ``load_model`` of the config at 32, 3,200, 32,000 and 1,000,000 layers, and with a
  ``layer_types`` list of 1,000,000 entries (each on a fresh registry cache, so the
  model is really resolved);
- the wall time of ``vramwise estimate CONFIG`` in a fresh process (which must not import torch),
  with the package's bytecode cached as an installed package has it.

With ``--configs`` (DIR: ``../shared/configs`` by default), for every config of the folder instead: the
time of an estimate from a fresh config dict by vramwise (``unsloth`` profile) and by the reference, the plain
single-file estimator of the seed's arithmetic in ``reference_estimator.py``, called alternately with the same
settings, and their ratio; the target is at most 0.5 on every config, and the configs above it are listed.

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
SHARED_CONFIGS = HERE.parent.parent / "shared" / "configs"
#: the most an estimate by vramwise may take, as a share of the reference's time on the same config
TARGET_RATIO = 0.5


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


def per_config(folder: Path, quick: bool) -> None:
    """vramwise against the reference on every config of ``folder``: fresh-dict medians and their ratio."""
    from reference_estimator import estimate_training_vram

    n = 400 if quick else 3000
    rows, skipped = [], []
    for path in sorted(folder.glob("*.json")):
        cfg = json.loads(path.read_text())
        try:
            estimate_training_vram(cfg)
            vramwise.estimate(cfg)
        except Exception as exc:  # noqa: BLE001 - a config one of the two does not read is named, not timed
            skipped.append(f"{path.name} ({type(exc).__name__})")
            continue
        reg = vramwise.Registry()
        grid = _grid()
        for _ in range(100):  # warm up: the model and every static stage of the grid are built once
            s = next(grid)
            vramwise.estimate(cfg, registry=reg, **s)
            estimate_training_vram(cfg, **s)
        ours, theirs = [copy.deepcopy(cfg) for _ in range(n)], [copy.deepcopy(cfg) for _ in range(n)]
        t_ours, t_ref = [], []
        clock = time.perf_counter
        for a, b in zip(ours, theirs):  # alternately, with the same settings, so that load falls on both alike
            s = next(grid)
            t0 = clock()
            vramwise.estimate(a, registry=reg, **s)
            t1 = clock()
            estimate_training_vram(b, **s)
            t2 = clock()
            t_ours.append(t1 - t0)
            t_ref.append(t2 - t1)
        v, r = statistics.median(t_ours) * 1e6, statistics.median(t_ref) * 1e6
        rows.append((path.name.removesuffix(".json"), v, r, v / r))
    print(f"configs: {folder}; medians over {n:,} estimates from a fresh dict each (unsloth profile; batch and "
          "sequence changed on every call)")
    width = max(len(r[0]) for r in rows) + 2
    print(f"{'config':<{width}}{'vramwise':>12}{'reference':>12}{'ratio':>8}")
    for name, v, r, ratio in rows:
        print(f"{name:<{width}}{v:>9.1f} us{r:>9.1f} us{ratio:>8.2f}")
    ratios = [r[3] for r in rows]
    over = [f"{name} {ratio:.2f}" for name, _, _, ratio in sorted(rows, key=lambda r: -r[3]) if ratio > TARGET_RATIO]
    print(f"ratio over {len(rows)} configs: median {statistics.median(ratios):.2f}, largest {max(ratios):.2f}; "
          f"above {TARGET_RATIO}: {', '.join(over) if over else 'none'}")
    if skipped:
        print(f"not timed: {', '.join(skipped)}")


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quick = "--quick" in sys.argv
    if "--configs" in sys.argv:
        per_config(Path(args[0]) if args else SHARED_CONFIGS, quick)
        return
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
