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
    a = vramwise.estimate(SMALL, attention="Flash_Attention_3", seq_len=8192)
    b = vramwise.estimate(SMALL, attention="flash_attention_2", seq_len=8192)
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
    p = formulas / "unsloth" / "overhead.yaml"
    text = p.read_text()
    assert "expr: '0 if method == \"inference\" else cuda_overhead_gib * gib'" in text or "cuda_overhead_bytes" in text
    lines = text.splitlines()
    k = next(i for i, line in enumerate(lines) if line.strip().startswith("expr:"))
    lines[k] = lines[k].split("expr:")[0] + f"expr: {expr}"
    p.write_text("\n".join(lines) + "\n")
    reg = vramwise.Registry(_families(), formulas)
    with pytest.raises(error) as info:
        vramwise.estimate(SMALL, registry=reg)
    assert "overhead.yaml" in str(info.value)
