"""Speed of ``vramwise.fit``: a warm full frontier, and one ``vramwise fit`` command in a fresh process.

    python benchmarks/bench_fit.py [CONFIG] [--quick]

- ``fit(spec, gpu=..., seq_lens=<16 sequence lengths>)`` on a warm registry (the model resolved,
  the profile compiled, the static stages built by a first call): every answer of ``fit``
  (methods, largest batch / sequence / rank, fewest GPUs) plus the frontier of 16 sequence
  lengths; median over many calls, for a few GPUs and both profiles. Target: <= 50 ms.
- the wall time of ``vramwise fit CONFIG --gpu "RTX 4090"`` in a fresh process (bytecode cached, as
  after ``pip install``). Target: <= 300 ms.

Medians; the machine is shared, so figures vary between runs.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import vramwise
from bench_estimate import _median_us  # same folder: the one timing helper
from vramwise.answers.fit import DEFAULT_FRONTIER

HERE = Path(__file__).resolve().parent
DEFAULT = HERE.parent / "examples" / "llama-3.1-8b.json"


def _median_ms(fn, n: int) -> float:
    return _median_us(fn, n) / 1e3


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quick = "--quick" in sys.argv
    path = Path(args[0]) if args else DEFAULT
    n = 10 if quick else 40
    reg = vramwise.Registry()
    spec = vramwise.load_model(str(path), registry=reg)
    assert len(DEFAULT_FRONTIER) == 16
    rows = []
    for profile, method in (("unsloth", "qlora"), ("unsloth", "full"), ("hf", "lora")):
        for gpu in ("RTX 4090", "H100", "24GiB"):
            def run():
                return vramwise.fit(spec, gpu=gpu, profile=profile, method=method, registry=reg,
                                    seq_lens=DEFAULT_FRONTIER)
            run()  # warm: the stages of every method are built once
            rows.append((profile, method, gpu, _median_ms(run, n)))

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    runs = []
    for k in range(1 + (5 if quick else 11)):
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c",
             "import sys; from vramwise.surfaces.cli.main import main; rc = main(sys.argv[1:]);"
             "sys.exit(rc if 'torch' not in sys.modules else 99)", "fit", str(path), "--gpu", "RTX 4090"],
            capture_output=True, text=True, env=env,
        )
        if k:
            runs.append(time.perf_counter() - t0)
        if proc.returncode:
            raise SystemExit(f"CLI failed ({proc.returncode}): {proc.stderr}")

    print(f"config: {path.name}; warm fit with a 16-length frontier, median of {n} calls (target <= 50 ms)")
    print(f"{'profile':<9}{'method':<8}{'gpu':<10}{'fit':>10}")
    for profile, method, gpu, ms in rows:
        print(f"{profile:<9}{method:<8}{gpu:<10}{ms:>7.1f} ms")
    print(f"CLI `vramwise fit {path.name} --gpu 'RTX 4090'` (fresh process), median of {len(runs)}: "
          f"{statistics.median(runs) * 1e3:.1f} ms (target <= 300 ms; torch not imported)")


if __name__ == "__main__":
    main()
