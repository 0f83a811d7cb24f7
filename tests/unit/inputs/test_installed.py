"""The version of an installed distribution read from its metadata file (vramwise.inputs.installed) is the one
importlib.metadata gives, which reads the same files through its own finders."""

import os
import sys
import zipfile
from importlib import metadata

import pytest

from vramwise.inputs.installed import distribution_version


def _reference(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@pytest.mark.parametrize("name", ["transformers", "PyYAML", "pyyaml", "jsonschema", "typing_extensions",
                                  "typing-extensions", "Typing.Extensions", "pytest", "vramwise",
                                  "no-such-distribution-here"])
def test_the_version_importlib_metadata_gives(name):
    assert distribution_version(name) == _reference(name)


def _dist_info(folder, name: str, version: str, metadata_text: str | None = None) -> None:
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(metadata_text if metadata_text is not None else
                                   f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nA description\nVersion: 9\n")


def test_the_first_folder_on_sys_path_wins(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    _dist_info(first, "demo_pkg", "1.2.3")
    _dist_info(second, "demo_pkg", "4.5.6")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(first), str(second)])
    assert distribution_version("demo-pkg") == "1.2.3" == _reference("demo-pkg")
    monkeypatch.setattr(sys, "path", [str(second), str(first)])
    assert distribution_version("Demo.Pkg") == "4.5.6" == _reference("Demo.Pkg")


def test_only_the_headers_are_read(tmp_path, monkeypatch):
    """A 'Version:' line in the description (after the first blank line) is not the version."""
    _dist_info(tmp_path, "demo_pkg", "2.0.0", "Metadata-Version: 2.1\nName: demo_pkg\n\nVersion: 9\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert distribution_version("demo_pkg") == _reference("demo_pkg")  # importlib.metadata: None


def test_a_zip_on_sys_path_is_left_to_importlib_metadata(tmp_path, monkeypatch):
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped_pkg-0.7.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped_pkg\nVersion: 0.7\n")
    monkeypatch.setattr(sys, "path", [str(archive)])
    assert distribution_version("zipped_pkg") == "0.7" == _reference("zipped_pkg")


def test_the_current_folder_is_the_empty_entry(tmp_path, monkeypatch):
    _dist_info(tmp_path, "here_pkg", "3.1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [""])
    assert os.getcwd() == str(tmp_path)
    assert distribution_version("here_pkg") == "3.1" == _reference("here_pkg")
