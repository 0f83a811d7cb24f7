"""The suite tests the checkout it lives in: tests/conftest.py stops the run with one line when the imported
``vramwise`` (or one of its data folders) is another copy, such as a plain ``pip install .`` of an older tree."""

from __future__ import annotations

import pytest

import conftest
from helpers import REPO, checkout_mismatch


def test_this_run_imports_the_checkout():
    assert checkout_mismatch() is None


def test_another_package_folder_is_named(tmp_path):
    line = checkout_mismatch(tmp_path)
    assert line is not None and "\n" not in line
    assert "the imported vramwise is " in line and f"not this checkout's engine/ ({tmp_path.resolve()}/engine)" in line
    assert "pip install -e '.[test]'" in line


def test_a_data_folder_of_another_copy_is_named(tmp_path):
    # the package is the checkout's (a link to its engine/), the family files are not: the first data
    # package of pyproject.toml's package-dir after vramwise itself is vramwise.families
    (tmp_path / "engine").symlink_to(REPO / "engine")
    line = checkout_mismatch(tmp_path)
    assert line is not None
    assert line.startswith(f"the imported vramwise.families is {(REPO / 'families').resolve()}, not this checkout's families/")


def test_a_mismatch_stops_the_run_at_configure(monkeypatch):
    monkeypatch.setattr(conftest, "checkout_mismatch", lambda: "the imported vramwise is elsewhere")
    with pytest.raises(pytest.UsageError, match="^the imported vramwise is elsewhere$"):
        conftest.pytest_configure(None)
