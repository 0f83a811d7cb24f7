"""Every shipped file validates; broken files are rejected with path:line:col and the JSON path."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

import vramwise
from vramwise import ExpressionError, FileFormatError

FAMILIES = Path(str(resources.files("vramwise.families")))
FORMULAS = Path(str(resources.files("vramwise.formulas")))


def test_shipped_files_load(registry):
    registry.check_all()
    # the bundled registry skips schema validation at run time; here every file is validated
    assert not registry.validate
    vramwise.Registry(validate=True).check_all()
    assert {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text", "generic"} <= set(registry.families)
    prof = registry.profile("unsloth")
    assert prof.components["weights"] == "weights_bytes"


def _families_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "families"
    dst.mkdir()
    for f in FAMILIES.glob("*.yaml"):
        shutil.copy(f, dst / f.name)
    return dst


def _write(folder: Path, name: str, text: str) -> Path:
    p = folder / name
    p.write_text(text)
    return p


def test_unknown_key_is_named_with_its_position(tmp_path):
    fam = _families_copy(tmp_path)
    _write(fam, "broken.yaml", "schema_version: 1\nfamily: broken\ndescription: x\nsource: y\nextends: llama\nmodel_type: [z]\n")
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(families_dir=fam).check_all()
    msg = str(info.value)
    assert f"{fam / 'broken.yaml'}:6:1: $.model_type: unknown key 'model_type'" in msg


def test_bad_enum_points_at_the_node(tmp_path):
    fam = _families_copy(tmp_path)
    _write(
        fam, "broken.yaml",
        "schema_version: 1\nfamily: broken\ndescription: x\nsource: y\nextends: llama\nmodel_types: [z]\n"
        "layers:\n  modules:\n    q_proj:\n      kind: linaer\n",
    )
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(families_dir=fam).check_all()
    msg = str(info.value)
    assert "broken.yaml:10:13: $.layers.modules.q_proj.kind: 'linaer' is not one of" in msg


def test_invalid_yaml(tmp_path):
    fam = _families_copy(tmp_path)
    _write(fam, "broken.yaml", "schema_version: 1\nfamily: [unclosed\n")
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(families_dir=fam).check_all()
    assert "broken.yaml:3:1: $: invalid YAML" in str(info.value)


def test_duplicate_keys_rejected(tmp_path):
    fam = _families_copy(tmp_path)
    _write(fam, "broken.yaml", "schema_version: 1\nfamily: broken\nfamily: broken\ndescription: x\nsource: y\nextends: llama\n")
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(families_dir=fam).check_all()
    assert "broken.yaml:3:1: $: duplicate key 'family'" in str(info.value)


def test_expression_with_unknown_name_in_family(tmp_path):
    fam = _families_copy(tmp_path)
    _write(
        fam, "broken.yaml",
        "schema_version: 1\nfamily: broken\ndescription: x\nsource: y\nextends: llama\nmodel_types: [z]\n"
        "layers:\n  attributes:\n    mlp_width:\n      expr: intermediate_sise * 2\n",
    )
    with pytest.raises(ExpressionError) as info:
        vramwise.Registry(families_dir=fam).check_all()
    assert "broken.yaml:10:13: $.layers.attributes.mlp_width.expr: unknown name `intermediate_sise`" in str(info.value)


def test_missing_parent_and_cycle(tmp_path):
    fam = _families_copy(tmp_path)
    _write(fam, "a.yaml", "schema_version: 1\nfamily: a\ndescription: x\nsource: y\nextends: b\n")
    _write(fam, "b.yaml", "schema_version: 1\nfamily: b\ndescription: x\nsource: y\nextends: a\n")
    with pytest.raises(FileFormatError, match="inheritance cycle"):
        vramwise.Registry(families_dir=fam).check_all()
    (fam / "b.yaml").unlink()
    with pytest.raises(FileFormatError, match=r"a\.yaml:5:10: \$\.extends: unknown family 'b'"):
        vramwise.Registry(families_dir=fam).check_all()


def test_model_type_served_twice(tmp_path):
    fam = _families_copy(tmp_path)
    _write(fam, "twin.yaml", "schema_version: 1\nfamily: twin\ndescription: x\nsource: y\nextends: llama\nmodel_types: [llama]\n")
    with pytest.raises(FileFormatError, match="already served by family 'llama'"):
        vramwise.Registry(families_dir=fam).check_all()


def _formulas_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "formulas"
    shutil.copytree(FORMULAS / "unsloth", dst / "unsloth", ignore=shutil.ignore_patterns("__*"))
    return dst


def test_formula_file_errors(tmp_path):
    forms = _formulas_copy(tmp_path)
    p = forms / "unsloth" / "optimizer.yaml"
    p.write_text(p.read_text().replace("expr: trainable_params * optimizer_bytes_per_param", "expr: trainable_params ^ 2"))
    reg = vramwise.Registry(formulas_dir=forms)
    with pytest.raises(ExpressionError) as info:
        reg.profile("unsloth")
    assert "optimizer.yaml:" in str(info.value) and "bitwise XOR" in str(info.value)
    assert "$.formulas[1].expr" in str(info.value)


def test_formula_cycle_and_missing_field(tmp_path):
    forms = _formulas_copy(tmp_path)
    p = forms / "unsloth" / "lora.yaml"
    p.write_text(p.read_text().replace("expr: lora_params * lora_bytes_per_param", "expr: lora_bytes_again"))
    p.write_text(p.read_text() + "  - id: lora_bytes_again\n    expr: lora_bytes\n    unit: bytes\n    description: x\n    source: y\n")
    reg = vramwise.Registry(formulas_dir=forms)
    with pytest.raises(FileFormatError, match="formula cycle"):
        reg.profile("unsloth")
    p.write_text(p.read_text().replace("    source: y\n", ""))
    with pytest.raises(FileFormatError, match=r"lora\.yaml:\d+:\d+: \$\.formulas\[2\]: 'source' is a required property"):
        vramwise.Registry(formulas_dir=forms).profile("unsloth")


def test_profile_needs_inputs_from_every_family(tmp_path):
    fam = _families_copy(tmp_path)
    _write(
        fam, "nomlp.yaml",
        "schema_version: 1\nfamily: nomlp\ndescription: x\nsource: y\nextends: llama\nmodel_types: [nomlp]\n"
        "layers:\n  attributes:\n    mlp_width: null\n  modules:\n    gate_proj: null\n    up_proj: null\n    down_proj: null\n",
    )
    reg = vramwise.Registry(families_dir=fam)
    with pytest.raises(FileFormatError, match="family nomlp lacks what profile unsloth needs: layer attribute mlp_width"):
        reg.check_all()
    with pytest.raises(FileFormatError, match="family nomlp lacks"):
        vramwise.estimate({"model_type": "nomlp", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
                           "num_attention_heads": 2, "intermediate_size": 8}, registry=reg)


def test_schemas_are_valid_json_schema():
    from jsonschema import Draft202012Validator

    from vramwise.core.datafiles import load_schema

    for name in ("family-1.schema.json", "formulas-1.schema.json", "profile-1.schema.json"):
        Draft202012Validator.check_schema(load_schema(name))


def test_unknown_profile(registry):
    with pytest.raises(vramwise.SettingsError, match="unknown profile 'nope'"):
        registry.profile("nope")
