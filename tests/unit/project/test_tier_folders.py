"""The folders of the tiers that ``-m`` deselects are not collected (tests/conftest.py, pytest_ignore_collect;
helpers.tier_deselected).

Each test under tests/measured/ is marked ``measured`` and each under tests/external/ ``external`` (by their
folder); a folder is left out only when the expression is false for its marker whatever the others are.
"""

from __future__ import annotations

import pytest

from helpers import tier_deselected


@pytest.mark.parametrize("markexpr,measured,external", [
    # the default run (pyproject.toml): `not measured` is false when measured is true, so the conjunction is
    ("not measured and not external and not slow", True, True),
    # the measured and external tiers, whole
    ("measured or external or slow", False, False),
    # .ci/run's distributed step: its modules are under tests/measured, so that folder must be collected (and a
    # test of either folder may carry the marker)
    ("distributed", False, False),
    # .ci/run's last pytest step: both folders, less what is distributed
    ("(measured or external or slow) and not distributed", False, False),
    # a measured or external test that is not slow is selected
    ("not slow", False, False),
    # external tests stay (external true, measured false: `not measured` is true)
    ("not measured", True, False),
    # `unit and not measured`: false for measured whatever unit is; for external, unit true makes it true
    ("unit and not measured", True, False),
    ("", False, False),  # no expression: everything is collected
    ("measured(\"x\")", False, False),  # a marker with arguments: not enumerated, collected as usual
])
def test_tier_deselected(markexpr, measured, external):
    assert tier_deselected(markexpr, "measured") is measured
    assert tier_deselected(markexpr, "external") is external
