"""DeepSpeed ZeRO stages 1-3 (and offload) against the hf profile's zero1/zero2/zero3 per-rank strategies, measured
with `vramwise measure --strategy zeroN` (DeepSpeed on its CPU accelerator) in world_size CPU processes joined by
gloo: every cell within the matrix's cell limit, the median within its median limit. Cells: ZERO of
benchmarks/zero_matrix.py."""

from __future__ import annotations

import pytest

# ranks in processes of their own, joined by gloo: .ci/run runs these modules in one process, alone, so
# that their ranks have the machine's cores (beside another worker's steps they took seven times as long)
pytestmark = pytest.mark.distributed

from helpers import matrix_checks, require_gloo  # noqa: E402

require_gloo("torch", "transformers", "peft", "deepspeed")

from zero_matrix import ZERO  # noqa: E402

test_cell_within_limit, test_median_within_limit = matrix_checks(ZERO)
