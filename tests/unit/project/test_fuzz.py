"""Property-based fuzzing of every input boundary (issue 10), with hypothesis.

Targets (generators in ``benchmarks/fuzzing/generators.py``): ``configs`` (mutations of the real configs),
``settings`` (every setting of ``vramwise.SETTINGS``, the profile, ``estimate_from_size``), ``cli``
(argv fragments and bad files) and ``data_files`` (hostile family and formula files through
``Registry(families_dir, formulas_dir)``). Each case runs in a forked sandbox worker (address-space
limit, wall-clock kill) and must give a sane estimate or a documented error within 200 MB and
``SUITE_TIME_LIMIT_S`` of CPU (``benchmarks/fuzzing/oracle.py``: a bound against hangs and runaway growth that a
busy machine cannot trip; the campaign, ``benchmarks/fuzz.py``, holds every case to 1 s).

Settings profiles: ``fuzz-ci`` (default; derandomized, the whole file in under 2 minutes on two cores
when nothing fails) and ``fuzz-long`` (10x the examples); pick one with ``VRAMWISE_FUZZ_PROFILE``.
``VRAMWISE_FUZZ_SAVE=folder`` writes each failing case hypothesis reports (its minimal one last) there.
The long campaign is ``benchmarks/fuzz.py``; found inputs are replayed by ``tests/unit/project/test_fuzz_corpus.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings, strategies as st

from fuzzing import GENERATORS, Sandbox, dumps
from fuzzing.corpus import save
from fuzzing.oracle import SUITE_TIME_LIMIT_S, Outcome
from fuzzing.targets import warm_up

_COMMON = dict(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
settings.register_profile("fuzz-ci", max_examples=100, **_COMMON)
settings.register_profile("fuzz-long", max_examples=1000, **_COMMON)
PROFILE = os.environ.get("VRAMWISE_FUZZ_PROFILE", "fuzz-ci")
SCALE = settings.get_profile(PROFILE).max_examples / 100
#: examples per target in the CI profile (about 4 ms, 1 ms, 40 ms and 70 ms a case on two cores)
EXAMPLES = {"configs": 400, "settings": 500, "cli": 250, "data_files": 250}
SAVE = os.environ.get("VRAMWISE_FUZZ_SAVE")

_SANDBOX: Sandbox | None = None


def sandbox() -> Sandbox:
    global _SANDBOX
    if _SANDBOX is None:
        warm_up()
        _SANDBOX = Sandbox(wall_limit=15.0, time_limit=SUITE_TIME_LIMIT_S)
    return _SANDBOX


@pytest.fixture(scope="module", autouse=True)
def _close_sandbox():
    yield
    global _SANDBOX
    if _SANDBOX is not None:
        _SANDBOX.close()
        _SANDBOX = None


_KINDS: dict[str, type] = {}


def finding_error(label: str) -> type:
    """One AssertionError subclass per kind of finding, so that hypothesis reports (and shrinks) each kind."""
    if label not in _KINDS:
        name = "Finding_" + "".join(c if c.isalnum() else "_" for c in label)
        _KINDS[label] = type(name, (AssertionError,), {"__module__": __name__})
    return _KINDS[label]


def check(target: str, case: dict) -> None:
    outcome: Outcome = sandbox().run(target, case)
    if outcome.status == "finding":
        text = dumps(case)
        note(f"case: {text[:4000]}{' ...' if len(text) > 4000 else ''}")
        if SAVE:
            save(target, case, outcome, Path(SAVE))
        raise finding_error(outcome.label)(
            f"{outcome.label}: {outcome.detail} (cpu {outcome.cpu_s:.2f} s, +{outcome.mem_mb:.0f} MB)")


def _fuzz(target: str):
    @settings(settings.get_profile(PROFILE), max_examples=max(1, int(EXAMPLES[target] * SCALE)))
    @given(st.randoms(use_true_random=False))
    def test(r):
        check(target, GENERATORS[target](r))

    test.__name__ = f"test_fuzz_{target}"
    test.__doc__ = f"{GENERATORS[target].__doc__} Sane or a documented error, bounded in time and memory."
    return test


test_fuzz_configs = _fuzz("configs")
test_fuzz_settings = _fuzz("settings")
test_fuzz_cli = _fuzz("cli")
test_fuzz_data_files = pytest.mark.slow(_fuzz("data_files"))  # about a minute and a half on one core
