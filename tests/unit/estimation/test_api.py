"""Public API: model sources, results, settings validation, errors."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

import vramwise
from vramwise import ConfigError, SettingsError

SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
# params: 2 * (256*256*2 + 128*256*2 + 3*512*256 + 2*256) + 256 + 2*1000*256 = 1,231,104
SMALL_PARAMS = 2 * (256 * 256 * 2 + 128 * 256 * 2 + 3 * 512 * 256 + 2 * 256) + 256 + 2 * 1000 * 256


def test_public_surface():
    for name in ("estimate", "load_model", "Estimate", "Registry", "ModelSpec", "VramwiseError", "ConfigError"):
        assert name in vramwise.__all__
    assert issubclass(vramwise.ExpressionError, vramwise.FileFormatError)
    for exc in (vramwise.ConfigError, vramwise.SettingsError, vramwise.FileFormatError, vramwise.GpuSelectionError,
                vramwise.EvaluationError):
        assert issubclass(exc, vramwise.VramwiseError)


def test_sources_agree(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMALL))
    from transformers import LlamaConfig

    d = dict(SMALL)
    d.pop("model_type")
    results = [
        vramwise.estimate(SMALL),
        vramwise.estimate(tmp_path / "config.json"),
        vramwise.estimate(str(tmp_path)),
        vramwise.estimate(LlamaConfig(**d)),
        vramwise.estimate(vramwise.load_model(SMALL)),
    ]
    assert {r.total for r in results} == {results[0].total}
    assert results[0].params_total == SMALL_PARAMS


def test_input_not_mutated():
    cfg = {**SMALL, "text_config": None, "quantization_config": {"bnb_4bit_use_double_quant": True}}
    before = copy.deepcopy(cfg)
    vramwise.estimate(cfg)
    assert cfg == before


def test_result_is_frozen_and_serialisable():
    e = vramwise.estimate(SMALL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.total = 0
    d = e.to_dict()
    json.dumps(d)
    assert d["total"] == e.total == sum(d[c] for c in vramwise.COMPONENTS)
    g = e.to_gb_dict()
    assert g["total"] == pytest.approx(e.total / 2**30)
    assert all(isinstance(getattr(e, c), int) for c in vramwise.COMPONENTS + ("total", "params_total"))


def test_trace_names_every_formula_with_its_line():
    e = vramwise.estimate(SMALL, profile="studio")
    ids = [t.id for t in e.trace]
    assert "weights_bytes" in ids and "activation_bytes" in ids and "total_bytes" in ids
    t = next(t for t in e.trace if t.id == "weights_bytes")
    assert t.file == "formulas/studio/weights.yaml"
    from importlib import resources

    lines = resources.files("vramwise.formulas").joinpath("studio/weights.yaml").read_text().splitlines()
    assert lines[t.line - 1].strip().startswith("expr:")
    assert t.value == e.weights
    t = next(t for t in e.trace if t.id == "text_weights_bytes")
    assert set(t.inputs) >= {"quantizable_params", "load_in_4bit", "skipped_quantizable_params"}


def test_missing_and_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="no such file or folder"):
        vramwise.estimate(tmp_path / "absent.json")
    with pytest.raises(ConfigError, match="has no config.json"):
        vramwise.estimate(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "llama",\n "hidden_size": }')
    with pytest.raises(ConfigError, match=r"bad\.json:2:17: invalid JSON"):
        vramwise.estimate(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must be a JSON object"):
        vramwise.estimate(bad)
    with pytest.raises(ConfigError, match="cannot read a model from int"):
        vramwise.estimate(42)


def test_config_lacking_a_field_names_the_aliases():
    cfg = dict(SMALL)
    del cfg["hidden_size"]
    with pytest.raises(ConfigError, match=r"config has no hidden_size \(tried: hidden_size\); family llama needs it"):
        vramwise.estimate(cfg)
    cfg = {"model_type": "mystery", "vocab_size": 10, "num_hidden_layers": 1, "num_attention_heads": 1}
    with pytest.raises(ConfigError, match=r"tried: hidden_size, n_embd, d_model, model_dim"):
        vramwise.estimate(cfg)


@pytest.mark.parametrize("field,value,needle", [
    ("hidden_size", 0, "at least 1"),
    ("hidden_size", -4, "at least 1"),
    ("num_hidden_layers", "32", "should be an int"),
    ("tie_word_embeddings", "yes", "should be a bool"),
])
def test_bad_config_values(field, value, needle):
    with pytest.raises(ConfigError, match=needle):
        vramwise.estimate({**SMALL, field: value})


def test_derived_value_out_of_range():
    # head_dim = 256 // 512 = 0 is rejected, naming the derivation
    with pytest.raises(ConfigError, match=r"head_dim, derived from the config as `hidden_size // num_attention_heads`, is 0"):
        vramwise.estimate({**SMALL, "num_attention_heads": 512})


@pytest.mark.parametrize("kwargs,needle", [
    ({"method": "dora"}, "unknown method 'dora'"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
    ({"seq_len": -1}, "seq_len must be a positive integer"),
    ({"lora_rank": 2.5}, "lora_rank must be a positive integer"),
    ({"gradient_checkpointing": "sometimes"}, "unknown gradient checkpointing mode"),
    ({"method": "full", "load_in_4bit": True}, "full fine-tuning cannot train a 4-bit model"),
    ({"method": "qlora", "load_in_4bit": False}, "qlora loads the base model in 4 bit"),
    ({"target_modules": []}, "target_modules is empty"),
    ({"optimizer": ""}, "optimizer must be a name"),
    ({"profile": "nope"}, "unknown profile"),
])
def test_bad_settings(kwargs, needle):
    with pytest.raises(SettingsError, match=needle):
        vramwise.estimate(SMALL, **kwargs)


@pytest.mark.parametrize("value,mode", [(True, "true"), (False, "none"), (None, "none"), ("false", "none"),
                                        ("TRUE", "true"), ("unsloth", "unsloth")])
def test_checkpointing_spellings(value, mode):
    assert vramwise.estimate(SMALL, gradient_checkpointing=value).settings.gradient_checkpointing == mode


def test_lora_with_4bit_override_is_quantized():
    a = vramwise.estimate(SMALL, method="lora", load_in_4bit=True)
    b = vramwise.estimate(SMALL, method="qlora")
    assert a.weights == b.weights < vramwise.estimate(SMALL, method="lora").weights


@pytest.fixture()
def offline_hub(monkeypatch, tmp_path):
    """An offline hub whose cache is tmp_path (huggingface_hub reads these variables at import)."""
    import importlib

    import huggingface_hub.constants as c

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    importlib.reload(c)
    yield tmp_path
    monkeypatch.undo()
    importlib.reload(c)


def test_hub_id_offline_without_cache(offline_hub):
    with pytest.raises(ConfigError, match="cannot get config.json of 'someone/not-cached'"):
        vramwise.estimate("someone/not-cached")


def test_hub_id_from_local_cache(offline_hub):
    """A config in the hub cache layout is read offline, without transformers or remote code."""
    repo = offline_hub / "models--someone--tiny"
    snap = repo / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(SMALL))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    assert vramwise.estimate("someone/tiny").params_total == SMALL_PARAMS


def test_hub_id_unknown_type_read_raw_without_remote_code(offline_hub):
    repo = offline_hub / "models--someone--exotic"
    snap = repo / "snapshots" / ("1" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({**SMALL, "model_type": "exotic_arch", "auto_map": {"AutoConfig": "x.Y"}}))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("1" * 40)
    e = vramwise.estimate("someone/exotic")
    assert e.family == "generic" and e.params_total == SMALL_PARAMS
    assert any("exotic_arch" in w for w in e.warnings)


def test_unknown_model_type_warns():
    e = vramwise.estimate({**SMALL, "model_type": "brand_new_arch"})
    assert e.family == "generic"
    assert any("brand_new_arch" in w for w in e.warnings)


def test_registry_default_can_be_reset():
    a = vramwise.Registry.default()
    vramwise.Registry.reset_default()
    b = vramwise.Registry.default()
    assert a is not b and set(a.families) == set(b.families)


def test_model_spec_names_the_family_and_holds_the_compiled_one(tmp_path):
    cfg = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 2, "num_attention_heads": 4}
    spec = vramwise.load_model(cfg)
    assert spec.family == "llama" and spec.compiled_family.name == "llama"
    assert spec.rules is spec.compiled_family  # the former name
    assert spec.origin == spec.source == "mapping"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert vramwise.load_model(str(path)).origin == str(path)
