"""torchtune's QLoRA dequantizes each NF4 projection for its matmul (torchao linear_nf4): eager, the codes go through
int64 indices and bf16 lookups, 14 bytes per weight at once; compiled, inductor writes the bf16 weight alone, 2 bytes
per weight (formulas/torchtune/weights.yaml nf4_dequant_bytes). The measurement of both figures on the CPU is
tests/measured/test_nf4_dequant_bytes_measured.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import vramwise

LLAMA = str(Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")


def _dequant(e) -> int:
    return next(t.value for t in e.trace if t.id == "nf4_dequant_bytes")


@pytest.mark.parametrize("compile, per_weight", [(False, 14), (True, 2)])
def test_the_largest_projection_is_dequantized_at_14_bytes_eager_and_2_compiled(compile, per_weight):
    # Llama-3.1-8B's largest NF4 projection is an MLP matrix, 14,336 x 4,096 = 58,720,256 weights:
    # eager 14 x 58,720,256 = 822,083,584 bytes, compiled 2 x 58,720,256 = 117,440,512
    e = vramwise.estimate(LLAMA, profile="torchtune", method="qlora", compile=compile)
    assert _dequant(e) == per_weight * 14_336 * 4_096


def test_bf16_weights_are_not_dequantized():
    assert _dequant(vramwise.estimate(LLAMA, profile="torchtune", method="lora", compile=True)) == 0
