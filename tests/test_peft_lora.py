"""LoRA adapter counts equal PEFT's own count on transformers' meta-device model.

Dense families with the seven projection names (Phi-3 with its own fused names, which PEFT
adapts whole), and attention-only targets for every family with standard attention names.
Routed experts and latent attention follow the unsloth profile's own rules (tested by hand
elsewhere), not PEFT's. The hf profile follows PEFT's convention: the seven names, all-linear
and the Mixtral names on every MoE family PEFT rewrites onto fused expert parameters (or not).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
peft = pytest.importorskip("peft")

import vramwise  # noqa: E402

SEVEN = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
DENSE = {
    "llama": SEVEN, "mistral": SEVEN, "qwen2": SEVEN, "qwen3": SEVEN, "gemma2": SEVEN, "gemma3_text": SEVEN,
    "phi3": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
}
STANDARD_ATTENTION = ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "mixtral", "qwen2_moe",
                      "qwen3_moe", "olmoe", "phimoe", "glm4_moe", "exaone_moe", "gpt_oss", "llama4_text",
                      "ernie4_5_moe"]
FIXES = {"hunyuan_v1_moe": {"head_dim": 128}}


def _small_default(model_type: str) -> dict:
    from transformers import AutoConfig

    cfg = json.loads(AutoConfig.for_model(model_type).to_json_string(use_diff=False))
    cfg["num_hidden_layers"] = 2
    for key in ("layer_types", "mlp_layer_types", "moe_layers"):
        if isinstance(cfg.get(key), list):
            cfg[key] = cfg[key][:2]
    return {**cfg, **FIXES.get(model_type, {})}


def _peft_count(cfg: dict, targets: list[str], r: int) -> int:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    d = dict(cfg)
    mt = d.pop("model_type")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(mt, **d))
    peft_model = get_peft_model(model, LoraConfig(r=r, target_modules=targets))
    return sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n)


@pytest.mark.parametrize("model_type", sorted(DENSE))
def test_dense_family_adapters(model_type):
    cfg = _small_default(model_type)
    ours = vramwise.estimate(cfg, method="lora", lora_rank=8, target_modules=DENSE[model_type]).params_trainable
    assert ours == _peft_count(cfg, DENSE[model_type], 8)


@pytest.mark.parametrize("model_type", STANDARD_ATTENTION)
def test_attention_only_adapters(model_type):
    cfg = _small_default(model_type)
    ours = vramwise.estimate(cfg, method="lora", lora_rank=4, target_modules=ATTENTION).params_trainable
    assert ours == _peft_count(cfg, ATTENTION, 4)


#: Model types whose default configs build on the meta device, MoE ones both rewritten by PEFT
#: (qwen2_moe layout) and not (mixtral, qwen2_moe itself, gpt_oss, llama4), plus latent attention.
PEFT_CONVENTION = ["llama", "qwen3", "gemma3_text", "phi3", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe",
                   "deepseek_v3", "glm4_moe", "exaone_moe", "ernie4_5_moe", "hunyuan_v1_moe", "gpt_oss",
                   "llama4_text", "qwen3_next"]
MIXTRAL_NAMES = ["q_proj", "v_proj", "w1", "w2", "w3"]


@pytest.mark.parametrize("targets", [SEVEN, MIXTRAL_NAMES], ids=["seven", "mixtral-names"])
@pytest.mark.parametrize("model_type", PEFT_CONVENTION)
def test_hf_profile_counts_what_peft_builds(model_type, targets):
    cfg = _small_default(model_type)
    ours = vramwise.estimate(cfg, profile="hf", method="lora", lora_rank=4, target_modules=targets)
    try:
        expected = _peft_count(cfg, targets, 4)
    except ValueError as e:  # PEFT finds no module to adapt (e.g. latent attention has no q_proj/v_proj)
        assert "not found in the base model" in str(e) or "did not match any" in str(e), e
        expected = 0
    assert ours.params_trainable == expected
