"""torchtune's distributed recipes (FSDP2 via training.shard_model) against the torchtune profile's per-rank
strategies, measured with `vramwise measure --stack torchtune --strategy ...` in world_size CPU processes
joined by gloo: every cell within the matrix's cell limit, the median within its median limit. Cells:
TORCHTUNE_STRATEGIES of benchmarks/strategy_matrices.py."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchtune")
pytest.importorskip("torchao")
dist = pytest.importorskip("torch.distributed")
if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from helpers import matrix_checks  # noqa: E402

from strategy_matrices import TORCHTUNE_STRATEGIES  # noqa: E402

test_cell_within_limit, test_median_within_limit = matrix_checks(TORCHTUNE_STRATEGIES)
