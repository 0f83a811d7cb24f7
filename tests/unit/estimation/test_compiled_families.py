"""The registries of the bundled families share the families compiled (Registry's _COMPILED, keyed by the files'
paths and bytes and by validation): a second registry, or a second ``vramwise check`` of a profile folder, compiles
no family again; a families folder given is compiled by its own registry."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

import vramwise
import vramwise.estimation.registry as registry_module

FAMILIES = Path(str(resources.files("vramwise.families")))
FORMULAS = Path(str(resources.files("vramwise.formulas")))


@pytest.fixture
def no_compiling(monkeypatch):
    """Compiling a family fails from then on."""
    def refuse(name, *args, **kwargs):
        raise AssertionError(f"family {name} compiled")
    return lambda: monkeypatch.setattr(registry_module, "compile_family", refuse)


def test_a_second_registry_of_the_bundled_families_compiles_none(no_compiling, tmp_path):
    llama = vramwise.Registry(validate=True).family("llama")
    no_compiling()
    assert vramwise.Registry(validate=True).family("llama") is llama
    # a folder given, even of the same bytes, is its registry's own to compile (and to check)
    copy = tmp_path / "families"
    shutil.copytree(FAMILIES, copy, ignore=shutil.ignore_patterns("__*"))
    with pytest.raises(AssertionError, match="family llama compiled"):
        vramwise.Registry(families_dir=copy).family("llama")


def test_a_second_check_of_a_profile_folder_compiles_no_family(no_compiling, tmp_path):
    folder = tmp_path / "size_only"
    shutil.copytree(FORMULAS / "size_only", folder, ignore=shutil.ignore_patterns("__*"))
    assert vramwise.check([folder]) == []
    no_compiling()
    assert vramwise.check([folder]) == []
    # a family file given is compiled with the families that extend it
    (tmp_path / "llama.yaml").write_text((FAMILIES / "llama.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(AssertionError, match=r"family \w+ compiled"):  # (llama, or first a family extending it)
        vramwise.check([tmp_path / "llama.yaml"])
