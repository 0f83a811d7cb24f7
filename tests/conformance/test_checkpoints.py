"""Quantization skip lists, already-quantized checkpoints and weights the text tower does not explain."""

from __future__ import annotations

import json

import pytest

import vramwise
from helpers import CONFIGS

TINY = {"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4}
# quantizable linears per layer: 4 x 64*64 + 3 x 128*64 = 40,960; two layers 81,920
# everything else: embedding and head 2 x 6,400 + norms 2*2*64 + 64 = 13,120 -> 95,040 parameters
QUANT, REST = 81_920, 13_120


def _skipped(entries):
    cfg = {**TINY, "quantization_config": {"load_in_4bit": True, "llm_int8_skip_modules": entries}}
    spec = vramwise.load_model(cfg)
    return spec.aggregates["skipped_quantizable_params"]


@pytest.mark.parametrize("entries,skipped", [
    (["q_proj"], 2 * 4096),                                             # short entry: a suffix, every layer
    (["lm_head"], 0),                                                    # already 16-bit
    (["model.layers.1"], 40_960),                                        # a whole layer
    (["model.layers.1", "model.layers.1.mlp.up_proj"], 40_960),          # parent and child counted once
    (["model.model.layers.0.self_attn"], 4 * 4096),                      # another text root
    (["model.language_model.layers.0.mlp.down_proj"], 8192),
    (["vision_tower.model.layers.0.self_attn.q_proj"], 0),               # another tower never matches
    (["model.vision_tower.layers.0.mlp"], 0),
    (["model"], QUANT),                                                  # the whole text tower
    (["model.layers.1"[:-1] + "11"], 0),                                 # layer 11 is not layer 1
])
def test_skip_matching(entries, skipped):
    assert _skipped(entries) == skipped


def test_skipped_weights_cost_16_bit():
    cfg = {**TINY, "quantization_config": {"load_in_4bit": True, "llm_int8_skip_modules": ["model.layers.1"]}}
    e = vramwise.estimate(cfg, profile="studio")  # the estimator's arithmetic
    # (81,920 - 40,960) * 2 / 3.2 + (13,120 + 40,960) * 2 = 25,600 + 108,160
    assert e.weights == 133_760
    # LoRA and full fine-tuning load 16-bit weights: the skip list changes nothing there
    assert vramwise.estimate(cfg, profile="studio", method="lora").weights == 2 * (QUANT + REST)


def test_already_quantized_checkpoint_warns():
    cfg = {**TINY, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    e = vramwise.estimate(cfg)
    assert any("already quantized (fp8)" in w for w in e.warnings)
    assert not any("already quantized" in w for w in vramwise.estimate(TINY).warnings)
    bnb = {**TINY, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}
    assert not any("already quantized" in w for w in vramwise.estimate(bnb).warnings)


@pytest.mark.skipif(not (CONFIGS / "Qwen__Qwen3-32B-FP8.json").is_file(), reason="../shared/configs is absent")
def test_shared_fp8_config_warns():
    e = vramwise.estimate(CONFIGS / "Qwen__Qwen3-32B-FP8.json")
    assert any("fp8" in w for w in e.warnings)


def _folder(tmp_path, total_size):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total_size}, "weight_map": {}}))
    return tmp_path


def test_checkpoint_bytes_beyond_the_text_tower(tmp_path):
    folder = _folder(tmp_path, 2 * 95_040 + 10_000)   # 10,000 bytes of vision tower
    e = vramwise.estimate(folder, profile="studio", method="lora")  # the estimator's arithmetic
    assert e.weights == 2 * 95_040 + 10_000
    assert any("model.safetensors.index.json" in w for w in e.warnings)
    full = vramwise.estimate(folder, profile="studio", method="full", optimizer="adamw_torch")
    # the extra 5,000 parameters train too: 6 bytes of optimizer state and 2 of gradient each
    assert full.params_trainable == 95_040 + 5_000
    assert full.optimizer == 6 * 100_040
    assert full.gradients == 2 * 100_040
    q = vramwise.estimate(folder, profile="studio")  # QLoRA: the extra bytes stay 16-bit, the optimizer only sees adapters
    assert q.weights == round(QUANT * 2 / 3.2 + REST * 2) + 10_000


def test_checkpoint_smaller_than_16_bit_adds_nothing(tmp_path):
    folder = _folder(tmp_path, 95_040)  # an 8-bit checkpoint: fewer bytes than 16-bit weights
    assert vramwise.estimate(folder, method="lora").weights == 2 * 95_040


def test_safetensors_files_when_no_index(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * (2 * 95_040 + 64))
    assert vramwise.estimate(tmp_path / "config.json", method="lora").weights == 2 * 95_040 + 64
