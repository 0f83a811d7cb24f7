"""The model-type index: model_types and fallback read by a YAML parse, in any style they are written."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

import vramwise
from vramwise.models.family_index import read_head

LLAMA_CFG = {"model_type": "my_llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


@pytest.mark.parametrize("text,head", [
    ("family: a\nmodel_types: [x, y]\n", {"model_types": ["x", "y"]}),
    ("family: a\nmodel_types:\n  - x\n  - y  # a comment\nother: 1\n", {"model_types": ["x", "y"]}),
    ("family: a\nmodel_types:\n- x\n- y\nother: 1\n", {"model_types": ["x", "y"]}),  # items at the key's column
    ("family: a\nmodel_types: [x,\n  y]\nfallback: true\n", {"model_types": ["x", "y"], "fallback": True}),
    ("model_types: []\n# fallback: true\n", {"model_types": []}),  # a comment is not an entry
    ("family: a\ndescription: >-\n  model_types: [z]\n", {}),  # inside another entry's value
    ("family: a\nfallback: false\n", {"fallback": False}),
    ("{family: a, model_types: [x]}\n", {"model_types": ["x"]}),  # a flow mapping: parsed whole
    ("---\nfamily: a\nmodel_types: [x]\n", {"model_types": ["x"]}),  # a document marker: parsed whole
    ("family: a\nmodel_types: [x,\ny]\n", {"model_types": ["x", "y"]}),  # a continuation at column 0: parsed whole
])
def test_read_head(text, head):
    assert read_head(text, "t.yaml") == head
    assert read_head(text, "t.yaml", whole=True) == head


def test_read_head_of_a_file_that_does_not_parse():
    assert read_head("family: a\nmodel_types: [x\n", "t.yaml") is None


def _bundled(tmp_path: Path) -> Path:
    dst = tmp_path / "families"
    shutil.copytree(Path(str(resources.files("vramwise.families"))), dst)
    return dst


@pytest.mark.parametrize("validate", [False, True])
def test_model_types_written_as_a_block_list_select_the_family(tmp_path, validate):
    fams = _bundled(tmp_path)
    (fams / "my_llama.yaml").write_text(
        "schema_version: 1\nfamily: my_llama\ndescription: a family made for the test\nsource: none\n"
        "extends: llama\nmodel_types:\n  - my_llama\n  - my_llama_2\n")
    reg = vramwise.Registry(fams, Path(str(resources.files("vramwise.formulas"))), validate=validate)
    assert reg.model(LLAMA_CFG).family == "my_llama"
    assert reg.model(dict(LLAMA_CFG, model_type="my_llama_2")).family == "my_llama"
    assert reg.family("my_llama").model_types == ("my_llama", "my_llama_2")


def test_a_model_type_served_twice_is_named_in_any_style(tmp_path):
    fams = _bundled(tmp_path)
    (fams / "my_llama.yaml").write_text(
        "schema_version: 1\nfamily: my_llama\ndescription: d\nsource: none\nextends: llama\nmodel_types:\n  - llama\n")
    # the second file's item (line 7, "  - llama": the name at column 5) and the first's (families/llama.yaml
    # line 7, "model_types: [llama]": the name at column 15) are both named
    with pytest.raises(vramwise.FileFormatError,
                       match=r"my_llama.yaml:7:5: .*'llama' is already served by family 'llama' \(.*llama.yaml:7:15\)"):
        vramwise.Registry(fams, validate=False)


@pytest.mark.parametrize("validate", [False, True])
def test_two_fallback_families_are_refused_naming_both_files_and_lines(tmp_path, validate):
    fams = _bundled(tmp_path)
    # the bundled generic.yaml says "fallback: true" on its line 11; this file says it on its line 6
    (fams / "zz_other.yaml").write_text(
        "schema_version: 1\nfamily: zz_other\ndescription: d\nsource: none\nextends: generic\nfallback: true\n")
    with pytest.raises(vramwise.FileFormatError) as e:
        vramwise.Registry(fams, validate=validate)
    message = str(e.value)
    assert "zz_other.yaml:6:11: $.fallback:" in message, message
    assert "generic.yaml:11:11)" in message, message
    assert "only one family may be" in message


def test_unknown_family_is_an_unknown_family_error():
    with pytest.raises(vramwise.UnknownFamilyError, match="unknown family 'nosuch'"):
        vramwise.Registry.default().family("nosuch")
    with pytest.raises(vramwise.ConfigError):  # a config problem for callers that catch those
        vramwise.Registry.default().resolve(LLAMA_CFG, family="nosuch")


def test_read_head_of_other_own_entries():
    text = ("family: a\nabstract: true\nreference:\n  model_type: x\n  minimal: {hidden_size: 8}\n"
            "examples:\n- name: one\n  config: {model_type: x}\nmodel_types: [x]\n")
    want = {"abstract": True, "reference": {"model_type": "x", "minimal": {"hidden_size": 8}},
            "examples": [{"name": "one", "config": {"model_type": "x"}}]}
    assert read_head(text, "t.yaml", keys=("abstract", "reference", "examples")) == want
    assert read_head(text, "t.yaml", whole=True, keys=("abstract", "reference", "examples")) == want


def test_family_entries_are_the_compiled_familys_own(registry):
    """What the parametrizations of the family tests read instead of compiling every family: for every bundled
    family, the same values as the compiled family's (entries a family does not inherit)."""
    from vramwise.models.family_index import OWN_KEYS

    for name in registry.family_names():
        got = registry.family_entries(name, *OWN_KEYS)
        fam = registry.family(name)
        assert tuple(got.get("model_types", ())) == fam.model_types, name
        assert bool(got.get("fallback", False)) == fam.fallback, name
        assert bool(got.get("abstract", False)) == fam.abstract, name
        assert tuple(got.get("examples", ())) == fam.examples, name
        assert got.get("reference") == fam.reference, name
    with pytest.raises(vramwise.UnknownFamilyError, match="unknown family 'nope'"):
        registry.family_entries("nope", "examples")
    with pytest.raises(ValueError, match="not entries a family's own file decides"):
        registry.family_entries("llama", "facts")  # inherited: only the compiled family has them


def test_family_entries_of_a_file_that_does_not_parse_name_its_position(tmp_path):
    fam = tmp_path / "families"
    fam.mkdir()
    (fam / "a.yaml").write_text("schema_version: 1\nfamily: a\nmodel_types: [x]\nexamples: [x\n")
    reg = vramwise.Registry(families_dir=fam)
    with pytest.raises(vramwise.FileFormatError, match=r"a\.yaml:\d+:\d+"):
        reg.family_entries("a", "examples")
