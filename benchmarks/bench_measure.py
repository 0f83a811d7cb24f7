"""Speed of ``vramwise.measure(..., fake=True)``: one simulated training step on CPU.

    python benchmarks/bench_measure.py [--only 8b|135m]

Cases: the bundled Llama-3.1-8B example (LoRA, gradient checkpointing, batch 1 x 2048) and
SmolLM2-135M-Instruct (LoRA and full fine-tuning, batch 1 x 128), read from ../shared/configs
next to the repository and skipped when that file is absent. Each case runs once (the default
two steps, the last reported) and prints its wall time and peak.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import vramwise

HERE = Path(__file__).resolve().parent
LLAMA_8B = HERE.parent / "examples" / "llama-3.1-8b.json"
SMOL_135M = HERE.parent.parent / "shared" / "configs" / "HuggingFaceTB__SmolLM2-135M-Instruct.json"

CASES = [
    ("8b", "Llama-3.1-8B  lora, checkpointing, 1 x 2048", LLAMA_8B,
     dict(method="lora", gradient_checkpointing="true", batch_size=1, seq_len=2048)),
    ("135m", "SmolLM2-135M  lora, 1 x 128", SMOL_135M, dict(method="lora", batch_size=1, seq_len=128)),
    ("135m", "SmolLM2-135M  full, 1 x 128", SMOL_135M, dict(method="full", batch_size=1, seq_len=128)),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted({c[0] for c in CASES}), help="run only these cases")
    args = ap.parse_args()
    for key, label, path, kw in CASES:
        if args.only and key != args.only:
            continue
        if not path.exists():
            print(f"{label:46s} skipped ({path} not found)")
            continue
        t0 = time.perf_counter()
        m = vramwise.measure(path, fake=True, **kw)
        dt = time.perf_counter() - t0
        print(f"{label:46s} {dt:8.1f} s   peak {m.peak / 2**30:8.3f} GiB ({m.peak_phase})")


if __name__ == "__main__":
    main()
