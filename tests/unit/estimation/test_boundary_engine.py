"""The engine's side of the boundary: typed, bounded facts and settings, and results checked as invariants."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

import vramwise

SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


@pytest.mark.parametrize("field,value,needle", [
    ("intermediate_size", 1e308, "intermediate_size is 1e+308; it must be at least 1 and at most 16,777,216"),
    ("vocab_size", 10**350, "vocab_size is 1000000"),
    ("hidden_size", 1e12, "at most 1,048,576"),
    ("hidden_size", float("nan"), "should be an int"),
    ("hidden_size", float("inf"), "should be an int"),
    ("sliding_window", -4, "at least 0"),
    ("num_experts_per_tok", -2, "at least 1"),
    ("hidden_size_per_layer_input", -64, "at least 0"),
    ("num_hidden_layers", 10**12, "at most 1,048,576"),
    ("layer_types", ["full_attention"] * (2**20 + 1), "at most 1,048,576 are allowed"),
])
def test_facts_out_of_range_are_named(field, value, needle):
    with pytest.raises(vramwise.ConfigError) as info:
        vramwise.estimate(dict(SMALL, **{field: value}))
    assert needle in str(info.value) and field in str(info.value)


@pytest.mark.parametrize("config", [
    dict(SMALL, model_type=["llama"]),
    dict(SMALL, model_type=float("nan")),
    dict(SMALL, model_type=-1),
    dict(SMALL, text_config={"model_type": {"a": 1}}),
])
def test_model_type_must_be_a_string(config):
    with pytest.raises(vramwise.ConfigError, match="model_type should be a string"):
        vramwise.estimate(config)


@pytest.mark.parametrize("settings,needle", [
    (dict(seq_len=10**200), "seq_len must be a positive integer of at most 33,554,432"),
    (dict(batch_size=2**21), "at most 1,048,576"),
    (dict(lora_rank=10**6), "at most 65,536"),
    (dict(attention="paged"), "unknown attention 'paged' (choose one of: flash_attention_2"),
    (dict(attention=3), "unknown attention 3"),
    (dict(lora_dropout=float("nan")), "probability"),
    (dict(target_modules=7), "target_modules must be a list"),
    (dict(optimizer="x" * 1000), "optimizer must be a name"),
])
def test_settings_out_of_range(settings, needle):
    with pytest.raises(vramwise.SettingsError) as info:
        vramwise.estimate(SMALL, **settings)
    assert needle in str(info.value)


def test_profile_must_be_a_name():
    with pytest.raises(vramwise.SettingsError, match="profile must be a name"):
        vramwise.estimate(SMALL, profile=["hf"])


def test_attention_is_case_insensitive_and_flash_3_is_memory_efficient():
    # studio: the estimator treats every memory-efficient kernel alike (unsloth tells Unsloth's own choice apart)
    a = vramwise.estimate(SMALL, profile="studio", attention="Flash_Attention_3", seq_len=8192)
    b = vramwise.estimate(SMALL, profile="studio", attention="flash_attention_2", seq_len=8192)
    assert a.settings.attention == "flash_attention_3" and a.total == b.total


def _formulas_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "formulas"
    shutil.copytree(Path(str(resources.files("vramwise.formulas"))), dst)
    return dst


def _families() -> Path:
    return Path(str(resources.files("vramwise.families")))


@pytest.mark.parametrize("expr,error", [
    ("-5", vramwise.InternalError),          # a negative component is a bug, never a result
    (".nan", vramwise.EvaluationError),      # NaN cannot be rounded to bytes: named at its formula
    (".inf", vramwise.EvaluationError),
    ("'\"many\"'", vramwise.EvaluationError),
])
def test_broken_components_never_become_results(tmp_path, expr, error):
    formulas = _formulas_copy(tmp_path)
    p = formulas / "studio" / "overhead.yaml"
    text = p.read_text()
    assert "expr: '0 if method == \"inference\" else cuda_overhead_gib * gib'" in text or "cuda_overhead_bytes" in text
    lines = text.splitlines()
    k = next(i for i, line in enumerate(lines) if line.strip().startswith("expr:"))
    lines[k] = lines[k].split("expr:")[0] + f"expr: {expr}"
    p.write_text("\n".join(lines) + "\n")
    reg = vramwise.Registry(_families(), formulas)
    with pytest.raises(error) as info:
        vramwise.estimate(SMALL, profile="studio", registry=reg)
    assert "overhead.yaml" in str(info.value)


def _families_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "families"
    shutil.copytree(_families(), dst)
    return dst


def _load(families: Path, formulas: Path | None = None) -> vramwise.Registry:
    reg = vramwise.Registry(families, formulas or Path(str(resources.files("vramwise.formulas"))))
    reg.family("llama")
    return reg


@pytest.mark.parametrize("text,needle", [
    ("a: &a [*a]\n", "YAML aliases"),                                         # self-reference
    ("a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: &c [*b, *b, *b]\n", "YAML aliases"),  # alias expansion
    ("a: " + "[" * 100 + "]" * 100 + "\n", "nested"),
    ("a: 1\n" + "b: " + "x" * (2 << 20) + "\n", "at most"),
])
def test_hostile_yaml_is_rejected_with_a_location(tmp_path, text, needle):
    fams = _families_copy(tmp_path)
    (fams / "llama.yaml").write_text(text)
    with pytest.raises(vramwise.FileFormatError) as info:
        _load(fams)
    assert needle in str(info.value) and "llama.yaml:" in str(info.value)


def test_data_files_must_be_utf8(tmp_path):
    fams = _families_copy(tmp_path)
    (fams / "llama.yaml").write_bytes("family: llama\n".encode("utf-16"))
    with pytest.raises(vramwise.FileFormatError, match="llama.yaml:1:1: .*not UTF-8"):
        _load(fams)


def _replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("expr,needle", [
    ("' + '.join(['hidden_size'] * 20000)", "at most 4,000 are allowed"),
    ("'-' * 3000 + 'hidden_size'", "nested"),
    ("'abs(' * 60 + 'hidden_size' + ')' * 60", "nested more than 50"),
])
def test_oversized_expressions_are_refused_at_load(tmp_path, expr, needle):
    fams = _families_copy(tmp_path)
    _replace_in(fams / "decoder.yaml", "    expr: num_attention_heads\n", f"    expr: '{eval(expr)}'\n")
    with pytest.raises(vramwise.ExpressionError) as info:
        _load(fams).family("llama")
    assert needle in str(info.value) and "decoder.yaml:" in str(info.value)


def test_huge_powers_and_repetitions_fail_at_evaluation(tmp_path):
    formulas = _formulas_copy(tmp_path)
    _replace_in(formulas / "studio" / "overhead.yaml", "cuda_overhead_gib * gib", "cuda_overhead_gib * gib + 4000000 ** 4000000")
    reg = vramwise.Registry(_families(), formulas)
    with pytest.raises(vramwise.EvaluationError, match="overhead.yaml:.*more than 4096 bits"):
        vramwise.estimate(SMALL, profile="studio", registry=reg)


@pytest.mark.parametrize("template,needle", [
    ("{key.__class__.__mro__}", "brace outside"),
    ("{key:>2000000000}", "brace outside"),
    ("{0}", "brace outside"),
    ("{secret}", "unknown placeholder {secret}"),
])
def test_message_templates_take_named_placeholders_only(tmp_path, template, needle):
    formulas = _formulas_copy(tmp_path)
    p = formulas / "studio" / "estimator.yaml"  # the optimizer table of the studio profile
    lines = p.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if "unknown_warning:" in line)
    lines[k] = lines[k].split("unknown_warning:")[0] + f"unknown_warning: '{template}'"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(vramwise.FileFormatError) as info:
        vramwise.Registry(_families(), formulas).profile("studio")
    assert needle in str(info.value) and "estimator.yaml:" in str(info.value)


def test_repeat_beyond_the_limit_is_a_config_error():
    cfg = {"model_type": "gemma3n_text", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_kv_shared_layers": 0,
           "altup_num_inputs": 10**7, "quantization_config": {"llm_int8_skip_modules": ["altup_projections"]}}
    with pytest.raises(vramwise.ConfigError, match="altup"):  # a 10**7-wide AltUp: shapes and copies out of range
        vramwise.estimate(cfg)


@pytest.mark.parametrize("kwargs,needle", [
    (dict(params=float("nan")), "params must be a positive finite number"),
    (dict(params=float("inf")), "params must be a positive finite number"),
    (dict(params=1e400), "params must be a positive finite number"),
    (dict(params=0.4), "from 1 to 1,000,000,000,000,000"),
    (dict(params=-8e9), "from 1 to"),
    (dict(params="8e9"), "params must be"),
    (dict(weight_bytes=1), "from 2 to 2,000,000,000,000,000"),
    (dict(params=1, weight_bytes=10**175), "weight_bytes must be"),
    (dict(params=10**400), "params must be"),
])
def test_size_only_inputs(kwargs, needle):
    with pytest.raises(vramwise.SettingsError, match=needle):
        vramwise.estimate_from_size(**kwargs)


def test_size_only_beyond_the_plausible_range():
    with pytest.raises(vramwise.SettingsError, match="params must be a positive finite number from 1 to"):
        vramwise.estimate_from_size(params=1e18)
    with pytest.raises(vramwise.SettingsError, match="size_only profile"):
        vramwise.estimate_from_size(params=8e9, profile="hf")


def test_model_types_must_be_names(tmp_path):
    fams = _families_copy(tmp_path)
    _replace_in(fams / "llama.yaml", "model_types: [llama]", "model_types: [[llama]]")
    with pytest.raises(vramwise.FileFormatError, match=r"llama.yaml:\d+:\d+: \$.model_types\[0\]"):
        vramwise.Registry(fams)


def test_values_a_family_rule_cannot_use_are_a_config_error():
    # latent attention (kv_lora_rank set) with a null qk_nope_head_dim: q_dim = heads x (nope + rope) cannot be formed
    cfg = {"model_type": "deepseek_v3", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 64,
           "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "kv_lora_rank": 16,
           "qk_nope_head_dim": None, "qk_rope_head_dim": 8, "v_head_dim": 8}
    with pytest.raises(vramwise.ConfigError, match="do not fit the family's rule for q_dim: families/decoder.yaml:"):
        vramwise.estimate(cfg)
