"""Registry.check_all keeps the digest of data that passed (vramwise.estimation.checked): the same bytes pass
again without compiling anything; an edited, added or removed file is checked again; a check without schema
validation does not stand for one with it; CHECKED.clear() forgets every check."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

import vramwise
import vramwise.estimation.registry as registry_module
from vramwise import FileFormatError
from vramwise.estimation.checked import CHECKED, folder_digest

FAMILIES = Path(str(resources.files("vramwise.families")))


@pytest.fixture
def small_families(tmp_path) -> Path:
    """A families folder of llama and its parent (and their stack files, where the bundled folder has them):
    enough for every profile, checked in about a second."""
    dst = tmp_path / "families"
    dst.mkdir()
    for name in ("decoder", "llama"):
        shutil.copy(FAMILIES / f"{name}.yaml", dst / f"{name}.yaml")
        for overlay in FAMILIES.glob(f"stacks/*/{name}.yaml"):
            (dst / "stacks" / overlay.parent.name).mkdir(parents=True, exist_ok=True)
            shutil.copy(overlay, dst / "stacks" / overlay.parent.name / overlay.name)
    return dst


@pytest.fixture
def no_compiling(monkeypatch):
    """Compiling a family fails: a check that passes under it compiled nothing."""
    def refuse(name, *args, **kwargs):
        raise AssertionError(f"family {name} compiled")
    return lambda: monkeypatch.setattr(registry_module, "compile_family", refuse)


@pytest.fixture(autouse=True)
def fresh_checks():
    CHECKED.clear()
    yield
    CHECKED.clear()


def test_the_same_bytes_pass_again_without_compiling(small_families, no_compiling):
    vramwise.Registry(families_dir=small_families).check_all()
    assert len(CHECKED) == 1
    no_compiling()
    vramwise.Registry(families_dir=small_families).check_all()  # another registry, the same bytes
    # a copy elsewhere has the same names and bytes: the same digest
    copy = small_families.parent / "copy"
    shutil.copytree(small_families, copy)
    vramwise.Registry(families_dir=copy).check_all()


def test_an_edited_file_is_checked_again(small_families):
    vramwise.Registry(families_dir=small_families).check_all()
    llama = small_families / "llama.yaml"
    llama.write_text(llama.read_text().replace("extends: decoder", "extends: nosuchparent", 1))
    with pytest.raises(FileFormatError, match=r"llama\.yaml:\d+:\d+: \$\.extends: unknown family 'nosuchparent'"):
        vramwise.Registry(families_dir=small_families).check_all()
    assert len(CHECKED) == 1  # the failure is not kept


@pytest.mark.parametrize("change", ["add", "remove", "rename"])
def test_an_added_removed_or_renamed_file_changes_the_digest(small_families, change):
    before = folder_digest(small_families)
    llama = small_families / "llama.yaml"
    if change == "add":
        (small_families / "other.yaml").write_text(llama.read_text())
    elif change == "remove":
        llama.unlink()
    else:
        llama.rename(small_families / "llama2.yaml")
    assert folder_digest(small_families) != before


def test_a_check_without_validation_does_not_stand_for_one_with_it(small_families, no_compiling):
    vramwise.Registry(families_dir=small_families, validate=False).check_all()
    no_compiling()
    vramwise.Registry(families_dir=small_families, validate=False).check_all()
    with pytest.raises(AssertionError, match="compiled"):
        vramwise.Registry(families_dir=small_families, validate=True).check_all()


def test_a_validated_check_stands_for_one_without(small_families, no_compiling):
    vramwise.Registry(families_dir=small_families, validate=True).check_all()
    no_compiling()
    vramwise.Registry(families_dir=small_families, validate=False).check_all()


def test_clear_forgets_every_check(small_families, no_compiling):
    vramwise.Registry(families_dir=small_families).check_all()
    CHECKED.clear()
    assert len(CHECKED) == 0
    no_compiling()
    with pytest.raises(AssertionError, match="compiled"):
        vramwise.Registry(families_dir=small_families).check_all()


def test_the_bundled_files_pass_warm(registry, no_compiling):
    registry.check_all()
    no_compiling()
    vramwise.Registry().check_all()
