"""The hf profile's compile=true against steps run under torch.compile (inductor) on one CPU process, the peak
read from the allocator's own reports. Cells: COMPILE of benchmarks/compile_matrix.py."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.long  # inductor compiles every cell's step: about 6 minutes of one core on a machine whose compile cache is empty

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from helpers import matrix_checks  # noqa: E402

from compile_matrix import COMPILE  # noqa: E402

test_cell_within_limit, test_median_within_limit = matrix_checks(COMPILE)
