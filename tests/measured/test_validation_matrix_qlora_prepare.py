"""QLoRA with and without prepare_model_for_kbit_training (kbit_prepare) against the hf profile, measured on
one CPU process with bitsandbytes' real 4-bit storage. Cells: QLORA_PREPARE of benchmarks/strategy_matrices.py."""

from __future__ import annotations

import pytest

# ranks in processes of their own, joined by gloo: .ci/run runs these modules in one process, alone, so
# that their ranks have the machine's cores (beside another worker's steps they took seven times as long)
pytestmark = pytest.mark.distributed

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("bitsandbytes")

from helpers import matrix_checks  # noqa: E402

from strategy_matrices import QLORA_PREPARE  # noqa: E402

test_cell_within_limit, test_median_within_limit = matrix_checks(QLORA_PREPARE)
