"""torchtune's distributed recipes (FSDP2 via training.shard_model) against the torchtune profile's per-rank
strategies, measured with `vramwise measure --stack torchtune --strategy ...` in world_size CPU processes
joined by gloo: every cell within the matrix's cell limit, the median within its median limit. Cells:
TORCHTUNE_STRATEGIES of benchmarks/strategy_matrices.py."""

from __future__ import annotations

import pytest

# ranks in processes of their own, joined by gloo: .ci/run runs these modules in one process, alone, so
# that their ranks have the machine's cores (beside another worker's steps they took seven times as long)
pytestmark = pytest.mark.distributed

from helpers import matrix_checks, require_gloo  # noqa: E402

require_gloo("torch", "torchtune", "torchao")

from strategy_matrices import TORCHTUNE_STRATEGIES  # noqa: E402

test_cell_within_limit, test_median_within_limit = matrix_checks(TORCHTUNE_STRATEGIES)
