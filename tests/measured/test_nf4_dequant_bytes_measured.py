"""The bytes per weight of torchao's NF4 dequantization, eager and compiled, measured on the CPU with the allocator's
own reports (vramwise.measuring.tracker.AllocationTracker, which sees into inductor's buffers): the two constants
formulas/torchtune/weights.yaml's nf4_dequant_bytes uses (14 eager, 2 compiled)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchao")

pytestmark = pytest.mark.filterwarnings("ignore")


def _peak(fn, x, w) -> int:
    from vramwise.measuring.tracker import AllocationTracker

    fn(x, w)  # the first call compiles
    tracker = AllocationTracker()
    with tracker.mode():
        y = fn(x, w)
        del y
    return tracker.peak


def test_linear_nf4_peaks_at_14_bytes_a_weight_eager_and_2_compiled():
    import torch
    from torchao.dtypes.nf4tensor import linear_nf4, to_nf4

    torch.manual_seed(0)
    out_features, in_features = 4096, 1024
    w = to_nf4(torch.randn(out_features, in_features, dtype=torch.bfloat16))
    x = torch.randn(8, in_features, dtype=torch.bfloat16)

    def f(x, w):
        return linear_nf4(x, w)

    n = out_features * in_features
    eager, compiled = _peak(f, x, w) / n, _peak(torch.compile(f), x, w) / n
    # the output (8 x 4096 bf16, 64 KiB) is 0.016 bytes a weight of the peak; the rest is the dequantization
    assert 13.9 <= eager <= 14.1, eager
    assert 1.9 <= compiled <= 2.1, compiled
