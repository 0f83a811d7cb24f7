"""docs/coverage.md is what scripts/coverage.py generates now: a stale document fails.

The table is regenerated in memory (every causal-LM model type transformers registers, built on
the meta device, in a pool of 2 processes) and compared with the file. It is skipped when the
installed transformers is not the version the document was made with: the set of model types and
their default configs are transformers', so another version gives another table.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from helpers import script_module  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "coverage.md"


def _script():
    return script_module("scripts/coverage.py", "vramwise_coverage_script")  # not "coverage": that is coverage.py's package


@pytest.mark.slow
def test_coverage_doc_is_current():
    assert DOC.is_file(), "docs/coverage.md is missing: run python scripts/coverage.py"
    cov = _script()
    text = DOC.read_text(encoding="utf-8")
    made_with = cov.doc_version(text)
    if made_with != transformers.__version__:
        pytest.skip(f"docs/coverage.md was generated with transformers {made_with}, transformers "
                    f"{transformers.__version__} is installed: regenerate it (python scripts/coverage.py) to compare")
    fresh = cov.render(cov.collect())
    if fresh != text:
        diff = list(difflib.unified_diff(text.splitlines(), fresh.splitlines(), "docs/coverage.md", "regenerated", lineterm="", n=0))
        pytest.fail("docs/coverage.md is stale: run python scripts/coverage.py\n" + "\n".join(diff[:40]), pytrace=False)
