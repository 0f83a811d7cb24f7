"""The regression oracle: the engine reproduces every recorded figure to the byte.

``tests/oracle/estimates.json.gz`` was written by ``tests/oracle/generate.py`` before the
engine was rewritten as a compiler; each case is recomputed here and must equal its record
(components, total, phases, figures, per-GPU minima, parameter counts, LoRA targets, warnings).
This proves that the rewrite kept its outputs, not that they are right.
"""

from __future__ import annotations

import gzip
import json

import pytest

from oracle.generate import OUT, SHARED, cases, compute

RECORDED = json.loads(gzip.open(OUT, "rt", encoding="utf-8").read())
CASES = dict(cases())


def test_every_recorded_case_is_still_generated():
    if not (SHARED / "configs").is_dir():
        pytest.skip("../shared/configs is absent")
    assert sorted(CASES) == sorted(RECORDED)


@pytest.mark.parametrize("prefix", sorted({cid.split("|")[0] for cid in CASES}))
def test_outputs_unchanged(prefix):
    ids = [cid for cid in CASES if cid.split("|")[0] == prefix]
    mismatches = []
    for cid in ids:
        got = json.loads(json.dumps(compute(CASES[cid])))
        if got != RECORDED[cid]:
            diff = {k: (RECORDED[cid].get(k), got.get(k)) for k in set(got) | set(RECORDED[cid]) if got.get(k) != RECORDED[cid].get(k)}
            mismatches.append(f"{cid}: {diff}")
    assert not mismatches, "\n".join(mismatches[:10])
