"""Replays every minimal failing input of ``tests/fuzz_corpus/`` (saved by ``benchmarks/fuzz.py``) through
the fuzzing oracle: each must now give a sane estimate or a documented error within 200 MB and the
suite's CPU bound (``SUITE_TIME_LIMIT_S``; the campaign's 1 s bound is checked by ``benchmarks/fuzz.py``).

A file fails here until the engine defends against it; then it stays as a regression test.
"""

from __future__ import annotations

import pytest

from fuzzing import Sandbox
from fuzzing import corpus as C
from fuzzing.targets import warm_up
from fuzzing.oracle import SUITE_TIME_LIMIT_S

FILES = C.files()


@pytest.fixture(scope="module")
def sandbox():
    warm_up()
    sb = Sandbox(wall_limit=15.0, time_limit=SUITE_TIME_LIMIT_S)
    yield sb
    sb.close()


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_corpus_case(path, sandbox):
    target, case, found = C.load(path)
    outcome = sandbox.run(target, case)
    assert outcome.status != "finding", (
        f"{path.name} ({target}): {outcome.label}: {outcome.detail} "
        f"(found {found.get('date')} as {found.get('label')})")


def test_corpus_files_round_trip(tmp_path):
    """A saved case reads back equal (NaN compared as text)."""
    from fuzzing.codec import dumps
    from fuzzing.oracle import Outcome

    for target, case in (("configs", {"config": {"a": float("nan"), "b": 10**400, "c": (1,), "d": {"$x": 1}}, "runs": []}),
                         ("data_files", {"path": "families/llama.yaml", "text": "a: 1\n# ---\nb: [.nan]\n",
                                         "recipe": {"kind": "prefix"}, "probe": {"kind": "estimate", "runs": []}})):
        path = C.save(target, case, Outcome("finding", "x", "y"), root=tmp_path)
        got_target, got, found = C.load(path)
        assert got_target == target and found["label"] == "x"
        assert dumps(got, sort_keys=True) == dumps(case, sort_keys=True)
