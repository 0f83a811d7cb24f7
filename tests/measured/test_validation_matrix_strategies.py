"""The multi-GPU strategies of the hf profile against `vramwise measure --strategy` (DDP and FSDP2 in
world_size CPU processes joined by gloo): every cell within 10 % of the busiest rank's measured peak,
the median within 5 %. Cells: STRATEGIES of benchmarks/validation_matrices.py."""

from __future__ import annotations

import pytest

# ranks in processes of their own, joined by gloo: .ci/run runs these modules in one process, alone, so
# that their ranks have the machine's cores (beside another worker's steps they took seven times as long)
pytestmark = pytest.mark.distributed

from helpers import matrix_checks, require_gloo  # noqa: E402

require_gloo("torch", "transformers")

from validation_matrices import STRATEGIES  # noqa: E402

test_cell_within_ten_percent, test_median_within_five_percent = matrix_checks(STRATEGIES)
