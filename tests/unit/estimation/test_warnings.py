"""Warnings a newcomer needs: settings that do not apply, sequences beyond the model's positions,
towers the estimate does not count, and expert tensors 4-bit loading leaves unquantized."""

from __future__ import annotations

import vramwise

SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 4096}
MOE = {"model_type": "qwen3_moe", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
       "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 3,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}


def test_settings_that_do_not_apply_are_named():
    e = vramwise.estimate(SMALL, method="full", lora_rank=64, lora_dropout=0.1)
    assert "lora_rank=64, lora_dropout=0.1 do not apply to full: ignored" in e.warnings
    assert not vramwise.estimate(SMALL, method="full").warnings  # defaults are not the user's doing


def test_sequence_beyond_the_positions():
    for profile in ("unsloth", "hf"):
        w = vramwise.estimate(SMALL, profile=profile, method="lora", seq_len=8192).warnings
        assert any("seq_len 8192 is beyond the model's max_position_embeddings (4096)" in x for x in w)
        assert not vramwise.estimate(SMALL, profile=profile, method="lora", seq_len=4096).warnings


def test_towers_the_estimate_does_not_count():
    e = vramwise.estimate(dict(SMALL, vision_config={"hidden_size": 1152}))
    assert any("vision or audio tower" in w for w in e.warnings)


def test_fused_experts_left_unquantized_under_4bit():
    e = vramwise.estimate(MOE, profile="hf", method="qlora")
    # 3 layers x 4 experts x (gate_up 2 x 32 x 64 + down 64 x 32) = 3 x 4 x 6,144 = 73,728 parameters in fused
    # tensors (the router is an nn.Linear and is quantized); float32 under prepare_model_for_kbit_training
    assert any("fused expert tensors (73,728 parameters)" in w for w in e.warnings), e.warnings
    assert not any("fused expert" in w for w in vramwise.estimate(MOE, profile="hf", method="lora").warnings)
