"""The double_quant setting: bitsandbytes' nested quantization of the NF4 block scales, as a run's
BitsAndBytesConfig (bnb_4bit_use_double_quant), a script building Linear4bit itself (compress_statistics=True by
default) or LitGPT's bnb.nf4-dq asks for it.

The small config below has 2 layers of 4 x 256 x 256 attention and 3 x 256 x 512 MLP weights: 2 x (262,144 +
393,216) = 1,310,720 quantized weights. Without double quantization a block of 64 weights has a float32 absmax,
4/64 bytes a weight; with it an 8-bit absmax (1/64) and a float32 per 256 blocks (4/16,384): the difference is
4/64 - 1/64 - 4/16,384 = 191/4,096 bytes a weight, so 1,310,720 x 191 / 4,096 = 320 x 191 = 61,120 bytes.
LitGPT quantizes the output head too (1,000 x 256 = 256,000 weights more): 1,566,720 x 191 / 4,096 = 73,057.03."""

from __future__ import annotations

import pytest

import vramwise

CFG = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000}


def weights(profile: str, **settings) -> float:
    return vramwise.estimate(dict(CFG), profile=profile, method="qlora", **settings).weights


@pytest.mark.parametrize("profile, default_on", [("hf", False), ("unsloth", True)])
def test_the_setting_changes_the_block_scales_by_191_4096_bytes_a_weight(profile, default_on):
    on, off = weights(profile, double_quant=True), weights(profile, double_quant=False)
    assert off - on == 61_120
    # not given: transformers' BitsAndBytesConfig default (off) for hf; Unsloth's own 4-bit load asks for it
    # (unsloth/models/loader.py:1039) for a checkpoint not yet quantized
    assert weights(profile) == (on if default_on else off)


def test_litgpt_reads_it_for_every_linear_the_head_included():
    # LitGPT's default bnb.nf4 (_NF4Linear, compress_statistics=False) is the plain figure
    assert weights("litgpt") - weights("litgpt", double_quant=True) == pytest.approx(73_057.03, abs=1)
    assert weights("litgpt") == weights("litgpt", double_quant=False)


@pytest.mark.parametrize("profile, given, said", [
    ("torchtune", False, "double_quant=false does not apply to torchtune"),
    ("studio", True, "double_quant=True is not read by the studio profile"),
])
def test_a_stack_that_cannot_change_it_says_so(profile, given, said):
    e = vramwise.estimate(dict(CFG), profile=profile, method="qlora", double_quant=given)
    assert e.weights == weights(profile)
    assert any(w.startswith(said) for w in e.warnings), e.warnings


def test_a_checkpoint_quantization_config_is_the_default_and_the_setting_wins():
    cfg = {**CFG, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True,
                                          "bnb_4bit_use_double_quant": True}}
    dq = vramwise.estimate(cfg, profile="hf", method="qlora")
    plain = vramwise.estimate(cfg, profile="hf", method="qlora", double_quant=False)
    assert plain.weights - dq.weights == 61_120


def test_it_applies_to_qlora_only():
    e = vramwise.estimate(dict(CFG), profile="hf", method="lora", double_quant=True)
    assert "double_quant=True does not apply to lora: ignored" in e.warnings
