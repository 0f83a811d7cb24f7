"""Registry.check_all keeps the digest of data that passed (vramwise.estimation.checked): the same bytes pass
again without compiling anything; an edited, added or removed file is checked again; a check without schema
validation does not stand for one with it; CHECKED.clear() forgets every check. And load_data_file keeps the
digests of the texts that passed a schema (VALID_TEXTS): the same text is not validated again under another
path, an invalid or edited one is."""

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


# -- texts that passed a schema's validation (vramwise.rules.datafiles.VALID_TEXTS) --------------------------

FAMILY_TEXT = "schema_version: 1\nfamily: tiny\ndescription: x\nsource: y\nextends: llama\nmodel_types: [tiny]\n"


@pytest.fixture
def valid_texts(monkeypatch):
    from vramwise.rules import datafiles

    datafiles.VALID_TEXTS.clear()
    yield datafiles
    datafiles.VALID_TEXTS.clear()


def refuse_validating(monkeypatch, datafiles):
    def refuse(name):
        raise AssertionError(f"validated against {name}")
    monkeypatch.setattr(datafiles, "_validator", refuse)


def test_a_valid_text_is_not_validated_again_under_another_path(valid_texts, monkeypatch):
    first = valid_texts.load_data_file(FAMILY_TEXT, "one/tiny.yaml", "family-1.schema.json")
    assert len(valid_texts.VALID_TEXTS) == 1
    refuse_validating(monkeypatch, valid_texts)
    second = valid_texts.load_data_file(FAMILY_TEXT, "two/tiny.yaml", "family-1.schema.json")
    assert (first.path, second.path) == ("one/tiny.yaml", "two/tiny.yaml")
    assert second.data == first.data and second.data is not first.data  # each load has its own data
    with pytest.raises(AssertionError, match="validated against profile-1.schema.json"):  # another schema
        valid_texts.load_data_file(FAMILY_TEXT, "two/tiny.yaml", "profile-1.schema.json")


def test_an_invalid_text_is_reported_at_each_path(valid_texts):
    text = FAMILY_TEXT.replace("schema_version: 1\n", "")
    for path in ("one/tiny.yaml", "two/tiny.yaml"):
        with pytest.raises(FileFormatError, match=rf"^{path}:1:1: \$: 'schema_version' is a required property"):
            valid_texts.load_data_file(text, path, "family-1.schema.json")
    assert len(valid_texts.VALID_TEXTS) == 0


def test_an_edited_text_is_validated_again(valid_texts, monkeypatch):
    valid_texts.load_data_file(FAMILY_TEXT, "tiny.yaml", "family-1.schema.json")
    refuse_validating(monkeypatch, valid_texts)
    with pytest.raises(AssertionError, match="validated"):
        valid_texts.load_data_file(FAMILY_TEXT + "# a comment\n", "tiny.yaml", "family-1.schema.json")
    valid_texts.VALID_TEXTS.clear()
    with pytest.raises(AssertionError, match="validated"):
        valid_texts.load_data_file(FAMILY_TEXT, "tiny.yaml", "family-1.schema.json")
