"""The second half of the refusal matrix of test_measure_refusals.py (every family's examples x every attention
kernel through `measure`, each cell run or refused as documented): a module of its own so that .ci/run's two
workers, which run each module in one process (--dist loadfile), measure a half each."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import test_measure_refusals as matrix  # noqa: E402 - the module beside this one (pytest puts its folder on the path)


@pytest.mark.slow
@pytest.mark.parametrize("family", matrix.SECOND_HALF)
def test_every_example_and_kernel_is_classified(family):
    matrix.classify(family)
