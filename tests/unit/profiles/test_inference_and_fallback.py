"""Inference estimates (the rule of docs/unsloth-profile.md#inference and the KV-cache figure) and the size-only fallback, by hand."""

from __future__ import annotations

import json

import pytest

import vramwise
from vramwise.surfaces.cli.main import main

GIB = 2**30
LLAMA_8B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8}
W = 8_030_261_248 * 2  # Llama-3.1-8B in 16 bit: 16,060,522,496 bytes
OVERHEAD = 1.4 * GIB   # 1,503,238,553.6


def test_inference_16_bit():
    e = vramwise.estimate(LLAMA_8B, method="inference")
    assert e.weights == W
    assert e.activations == round(0.3 * W)  # 4,818,156,748.8
    assert e.lora == e.optimizer == e.gradients == e.overhead == 0
    assert e.total == W + round(0.3 * W) == 20_878_679_245  # 1.3 x the weights


def test_inference_4_bit():
    e = vramwise.estimate(LLAMA_8B, method="inference", load_in_4bit=True)
    assert e.weights == W / 3.2 == 5_018_913_280
    # max(0.3 * 5,018,913,280 = 1,505,673,984, 2 GiB) = 2 GiB
    assert e.activations == 2 * GIB
    assert e.total == 5_018_913_280 + 2 * GIB


def test_kv_cache_standard_attention():
    e = vramwise.estimate(LLAMA_8B, method="inference", batch_size=4, seq_len=2048)
    # 32 layers x batch 4 x 2048 tokens x (2 x 8 KV heads x 128) x 2 bytes = 1 GiB
    assert e.figures["kv_cache"] == 32 * 4 * 2048 * 2 * 1024 * 2 == GIB
    assert e.figures["kv_cache_total"] == round(W + GIB + OVERHEAD) == 18_637_502_874


def test_kv_cache_sliding_window_caps_tokens():
    gemma2_2b = {"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
                 "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                 "sliding_window": 4096}
    e = vramwise.estimate(gemma2_2b, method="inference", batch_size=1, seq_len=8192)
    # 13 sliding layers keep 4096 tokens, 13 full layers 8192; 2 x 4 x 256 = 2048 elements per token
    assert e.figures["kv_cache"] == 13 * 4096 * 2048 * 2 + 13 * 8192 * 2048 * 2 == 654_311_424
    mistral = {"model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
               "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "sliding_window": 4096}
    e = vramwise.estimate(mistral, method="inference", batch_size=1, seq_len=8192)
    assert e.figures["kv_cache"] == 32 * 4096 * 2048 * 2 == 536_870_912


def test_kv_cache_mla_caches_the_latent():
    v3 = {"model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
          "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
          "n_routed_experts": 256, "n_shared_experts": 1, "first_k_dense_replace": 3, "q_lora_rank": 1536,
          "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
    e = vramwise.estimate(v3, method="inference", batch_size=1, seq_len=4096)
    # 61 layers x 4096 tokens x (512 latent + 64 rotary) x 2 bytes
    assert e.figures["kv_cache"] == 61 * 4096 * 576 * 2 == 287_834_112


def test_kv_shared_layers_cache_nothing():
    g4 = {"model_type": "gemma4_text", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 32,
          "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
          "global_head_dim": 16, "num_kv_shared_layers": 2, "hidden_size_per_layer_input": 0,
          "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
          "sliding_window": 512}
    e = vramwise.estimate(g4, method="inference", batch_size=1, seq_len=1024)
    # layer 0: sliding, 512 tokens x 2*2*8; layer 1: full, 1024 x 2*2*16; layers 2-3 shared: nothing
    assert e.figures["kv_cache"] == 512 * 32 * 2 + 1024 * 64 * 2


def test_training_reports_no_kv_cache():
    figures = vramwise.estimate(LLAMA_8B).figures
    assert figures["kv_cache"] == 0 and figures["kv_cache_total"] == 0


@pytest.mark.parametrize("method,expected", [
    # 8e9 parameters -> 16e9 bytes in 16 bit; overhead 1,503,238,553.6
    ("qlora", 16e9 / 3.2 + 0.04 * 16e9 + 0.15 * 16e9 + OVERHEAD),   # 5e9 + 0.64e9 + 2.4e9
    ("lora", 16e9 + 0.04 * 16e9 + 0.15 * 16e9 + OVERHEAD),
    ("full", 3.5 * 16e9 + OVERHEAD),
])
def test_size_only_fallback(method, expected):
    e = vramwise.estimate_from_size(params=8e9, method=method)
    assert e.total == round(expected)
    assert e.family == "size_only" and any("fallback" in w for w in e.warnings)


def test_size_only_activations_scale_with_batch_and_sequence():
    e = vramwise.estimate_from_size(weight_bytes=16_000_000_000, method="qlora", batch_size=8, seq_len=4096)
    # 0.15 x 16e9 x (8 / 4) x (4096 / 2048)
    assert e.activations == 0.15 * 16e9 * 2 * 2 == 9_600_000_000


def test_size_only_rejects_nonsense():
    with pytest.raises(vramwise.SettingsError, match="params"):
        vramwise.estimate_from_size()
    with pytest.raises(vramwise.SettingsError, match="positive"):
        vramwise.estimate_from_size(params=-5)


def test_cli_params_and_weight_folder(tmp_path, capsys):
    assert main(["estimate", "--params", "8e9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == round(16e9 / 3.2 + 0.04 * 16e9 + 0.15 * 16e9 + OVERHEAD)
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 1_000_000)
    assert main(["estimate", str(tmp_path), "--method", "full", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == round(3.5 * 1_000_000 + OVERHEAD)
    assert main(["estimate"]) == 2
    assert "give a MODEL" in capsys.readouterr().err


def test_cli_inference_prints_both_figures(capsys):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "config.json"
        p.write_text(json.dumps(LLAMA_8B))
        assert main(["estimate", str(p), "--method", "inference"]) == 0
    out = capsys.readouterr().out
    assert "KV cache" in out and "1.00 GiB" in out


def test_cli_gpus_and_select_without_a_driver(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert out.strip()
    assert main(["select", "--params", "8e9", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "mode" in data and "device_map" in data
