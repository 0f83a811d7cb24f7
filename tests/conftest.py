"""Test tiers, the shared-corpus switch and the session fixtures.

The folders are the tiers; each test is marked by its folder:

- ``tests/unit/``: the engine, answers, surfaces and data files, with hand-derived figures (marker ``unit``);
- ``tests/conformance/``: exactness against transformers and PEFT, the regression oracle, the seed's
  figures (marker ``conformance``);
- ``tests/measured/``: real and fake CPU training steps against the estimates (marker ``measured``);
- ``tests/external/``: checks that need a program beside Python: the page in Chromium, DeepSpeed's
  estimators (marker ``external``; tests elsewhere that need such a program carry the marker too).

``python -m pytest -q`` runs the fast tiers (unit and conformance: ``pyproject.toml`` deselects
``measured``, ``external`` and ``slow`` by default) in two worker processes;
``python -m pytest -q -n 2 --dist loadfile -m "measured or external or slow"`` runs the rest in two worker
processes, each module in one worker, so what a module's tests share in the process (a validation matrix's
measured cells, a module fixture's server) is made once (``slow``: the whole-corpus checks of the unit and
conformance folders that take a minute or more on one core). ``.ci/run`` runs the modules marked ``distributed``
(cells that start rank processes joined by gloo) first, alone in one process (``-n 0 -m distributed``), and
then the rest (``... and not distributed``).

Tests that read the shared config corpus (``../shared/configs``) skip with a reason naming it when it is
absent; with ``VRAMWISE_REQUIRE_SHARED=1`` (set by ``.ci/run``) its absence fails the run instead, so no
test vanishes silently. Tests that need DeepSpeed skip with a reason naming it when it is not installed
(``helpers.require_deepspeed``); with ``VRAMWISE_REQUIRE_DEEPSPEED=1`` (also set by ``.ci/run``) such a skip,
of a test or of a whole module, fails instead.

The run stops at once (one line) when the imported ``vramwise`` or one of its data folders (families/,
formulas/, ...) is not this checkout's: the tests must see the working tree, not an installed copy.
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# The cache of compiled data between processes (vramwise.rules.diskcache): a folder of this run's own, never the
# user's, set before vramwise is imported (the subprocesses of tests inherit it too).
os.environ["VRAMWISE_CACHE_DIR"] = _CACHE = tempfile.mkdtemp(prefix="vramwise-test-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

# One compute thread per core: each of the worker processes (pytest-xdist; PYTEST_XDIST_WORKER_COUNT) gets an equal
# share of the cores for torch's and OpenMP's pools, set before torch is imported. Two workers with two threads
# each on two cores made the CPU training steps slower in total (OpenMP's threads wait by spinning): a QLoRA cell
# of the validation matrix took 21.4 s of CPU with two threads where it took 16.2 with one.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
if _WORKERS > 1:
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, str(max(1, (os.cpu_count() or 1) // _WORKERS)))

import vramwise
# tests/ is on sys.path (pyproject.toml: pythonpath)
from helpers import SHARED_MISSING, checkout_mismatch, deepspeed_missing, shared_present, tier_deselected

HERE = Path(__file__).resolve().parent

TIERS = ("unit", "conformance", "measured", "external")


def pytest_configure(config):
    mismatch = checkout_mismatch()
    if mismatch:
        raise pytest.UsageError(mismatch)
    if os.environ.get("VRAMWISE_REQUIRE_SHARED") == "1" and not shared_present():
        raise pytest.UsageError(f"VRAMWISE_REQUIRE_SHARED=1 but {SHARED_MISSING}")


def pytest_ignore_collect(collection_path, config):
    """The folders of the tiers that ``-m`` deselects (by default measured and external) are not collected: their
    modules import torch's distributed stacks, lightning and Playwright, seconds of every worker's collection,
    for tests that are deselected anyway."""
    if collection_path.parent == HERE and collection_path.name in ("measured", "external") and collection_path.is_dir():
        return True if tier_deselected(config.getoption("markexpr", "") or "", collection_path.name) else None
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = Path(str(item.fspath)).resolve().relative_to(HERE).parts
        if len(parts) > 1 and parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))
    # the tests marked slow first, then the modules marked long (minutes of one worker): in a run that selects them
    # (-m slow, or -n 2 with an explicit -m) the workers start on them while the rest is shared out, so no single
    # long module is left running alone at the end
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, item.get_closest_marker("long") is None))


def _required_but_skipped(report) -> str | None:
    """Why a skipped report is a failure: a skip for want of the shared corpus under VRAMWISE_REQUIRE_SHARED=1,
    or for want of DeepSpeed under VRAMWISE_REQUIRE_DEEPSPEED=1 (None: the skip stands)."""
    if not report.skipped:
        return None
    reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if os.environ.get("VRAMWISE_REQUIRE_SHARED") == "1" and "../shared" in reason:
        return f"skipped for want of the shared corpus under VRAMWISE_REQUIRE_SHARED=1: {reason}"
    if os.environ.get("VRAMWISE_REQUIRE_DEEPSPEED") == "1" and deepspeed_missing(reason):
        return f"skipped for want of DeepSpeed under VRAMWISE_REQUIRE_DEEPSPEED=1: {reason}"
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skip that the environment requires not to happen (_required_but_skipped) is a failure."""
    outcome = yield
    report = outcome.get_result()
    why = _required_but_skipped(report)
    if why:
        report.outcome = "failed"
        report.longrepr = why


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same for a whole module skipped at its top (pytest.importorskip at module level)."""
    outcome = yield
    report = outcome.get_result()
    why = _required_but_skipped(report)
    if why:
        report.outcome = "failed"
        report.longrepr = why


@pytest.fixture(scope="session")
def registry():
    """The bundled registry: the one the library's own calls and the modules' tables use, so its
    families are compiled once per process."""
    return vramwise.Registry.default()
