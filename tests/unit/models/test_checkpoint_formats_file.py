"""formulas/checkpoint_formats.yaml is valid under its schema, and a bad entry is rejected with its place."""

from __future__ import annotations

from importlib import resources

import pytest

from vramwise.rules.datafiles import load_data_file
from vramwise.errors import FileFormatError

SCHEMA = "checkpoint-formats-1.schema.json"


def _text() -> str:
    return resources.files("vramwise.formulas").joinpath("checkpoint_formats.yaml").read_text(encoding="utf-8")


def test_the_bundled_file_is_valid():
    df = load_data_file(_text(), "formulas/checkpoint_formats.yaml", SCHEMA, validate=True)
    ids = [f["id"] for f in df.data["formats"]]
    assert len(ids) == len(set(ids))


def test_an_unknown_key_is_named_with_its_line():
    text = _text().replace("    quant_method: fp8\n", "    quant_method: fp8\n    bytes_per_weight: 1\n", 1)
    with pytest.raises(FileFormatError) as info:
        load_data_file(text, "formats.yaml", SCHEMA, validate=True)
    message = str(info.value)
    assert "formats.yaml:" in message and "bytes_per_weight" in message and "$.formats[0]" in message


def test_vramwise_check_reads_a_formats_file(tmp_path):
    import vramwise

    bad = tmp_path / "checkpoint_formats.yaml"
    bad.write_text(_text().replace("out_features * in_features\n", "out_features * in_feature\n", 1), encoding="utf-8")
    problems = vramwise.check([str(bad)])
    assert len(problems) == 1 and "unknown name `in_feature`" in problems[0] and str(bad) + ":" in problems[0]
    good = tmp_path / "good" / "checkpoint_formats.yaml"
    good.parent.mkdir()
    good.write_text(_text(), encoding="utf-8")
    assert vramwise.check([str(good)]) == []
