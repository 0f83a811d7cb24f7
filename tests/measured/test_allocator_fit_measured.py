"""Two hf cells of benchmarks/allocator_fit.yaml run again (a fake step through the allocator model, one with
gradient checkpointing, one without): the fake step's tensor peak and the modelled reserved peak are those the file
records, to the byte, so the fit the constants come from is reproducible from the script."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("peft")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import allocator_fit  # noqa: E402
import gpu_runs  # noqa: E402

RECORDED = yaml.safe_load((ROOT / "benchmarks" / "allocator_fit.yaml").read_text(encoding="utf-8"))["cells"]
CELLS = [allocator_fit.FIT[0], allocator_fit.FIT[1]]  # Llama 3.2 1B LoRA: batch 1 x 512 without, 4 x 2048 with


@pytest.mark.slow
@pytest.mark.parametrize("cell", CELLS, ids=[f"{c[0]}-{c[2]}x{c[3]}-{c[4]}" for c in CELLS])
def test_a_cell_reproduces_its_record(cell):
    if gpu_runs.shared_config(cell[0]) is None:
        pytest.skip(f"no shared config for {cell[0]} (../shared/configs)")
    got = allocator_fit.run_cell(cell, "fit", "hf")
    want = next(c for c in RECORDED if (c["stack"], c["model"], c["method"], c["batch_size"], c["seq_len"],
                                        c["gradient_checkpointing"]) == ("hf", cell[0], *cell[1:]))
    for key in ("fake_tensor_peak", "modelled_reserved_peak", "estimate_tensor_peak", "estimate_activations_at_peak"):
        assert got[key] == want[key], key
