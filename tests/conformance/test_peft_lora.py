"""LoRA adapter counts equal PEFT's own count on transformers' meta-device model.

Dense families with the seven projection names (Phi-3 with its own fused names, which PEFT
adapts whole), and attention-only targets for every family with standard attention names; what
is checked for a family is its file's `reference.lora` block.
Routed experts and latent attention follow the unsloth profile's own rules (tested by hand
elsewhere), not PEFT's. The hf profile follows PEFT's convention: the seven names, all-linear
and the Mixtral names on every MoE family PEFT rewrites onto fused expert parameters (or not).
"""

from __future__ import annotations

import json

import pytest

from helpers import FAST_FAMILIES, require_installed, sample_families, slow_unless

require_installed("torch", "peft")  # imported by the tests that use them

import vramwise  # noqa: E402

SEVEN = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
MIXTRAL_NAMES = ["q_proj", "v_proj", "w1", "w2", "w3"]

# What is checked for a family is stated in its file's `reference:` block (`lora:`); no family is named here.
# (The files' own entries, the compiled families' values, read without compiling every family at collection.)
_REG = vramwise.Registry.default()
_OWN = {name: _REG.family_entries(name, "abstract", "fallback", "reference") for name in _REG.family_names()}
_REFS = {name: dict(own["reference"]) for name, own in _OWN.items()
         if not own.get("abstract") and not own.get("fallback") and own.get("reference") is not None}
_LORA = {name: ref.get("lora") or {} for name, ref in _REFS.items()}


def _merge(base: dict, fixes: dict) -> dict:
    out = dict(base)
    for k, v in fixes.items():
        out[k] = _merge(out.get(k) or {}, v) if isinstance(v, dict) else v
    return out


def _small_default(family: str) -> dict:
    from transformers import AutoConfig

    ref = _REFS[family]
    cfg = json.loads(AutoConfig.for_model(ref["model_type"]).to_json_string(use_diff=False))
    cfg["num_hidden_layers"] = 2
    for key in ("layer_types", "mlp_layer_types", "moe_layers"):
        if isinstance(cfg.get(key), list):
            cfg[key] = cfg[key][:2]
    return _merge(cfg, ref.get("default_fixes") or {})


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


# the default run: FAST_FAMILIES (tests/helpers.py); .ci/run's slow tier: every family
@pytest.mark.parametrize("family", slow_unless(sorted(n for n, lora in _LORA.items() if "dense_targets" in lora),
                                             lambda v: v[0] in FAST_FAMILIES))
def test_dense_family_adapters(family):
    cfg = _small_default(family)
    targets = list(_LORA[family]["dense_targets"])
    ours = vramwise.estimate(cfg, method="lora", lora_rank=8, target_modules=targets).params_trainable
    assert ours == _peft_count(cfg, targets, 8)


@pytest.mark.parametrize("family", sample_families(sorted(n for n, lora in _LORA.items() if "attention_targets" in lora)))
def test_attention_only_adapters(family):
    cfg = _small_default(family)
    targets = list(_LORA[family]["attention_targets"])
    ours = vramwise.estimate(cfg, method="lora", lora_rank=4, target_modules=targets).params_trainable
    assert ours == _peft_count(cfg, targets, 4)


#: Families whose default configs build on the meta device (`hf_profile: true`), MoE ones both
#: rewritten by PEFT (qwen2_moe layout) and not (mixtral, qwen2_moe itself, gpt_oss, llama4),
#: plus latent attention.
@pytest.mark.parametrize("targets", [SEVEN, MIXTRAL_NAMES], ids=["seven", "mixtral-names"])
@pytest.mark.parametrize("family", slow_unless(sorted(n for n, lora in _LORA.items() if lora.get("hf_profile")),
                                             lambda v: v[0] in FAST_FAMILIES))
def test_hf_profile_counts_what_peft_builds(family, targets):
    cfg = _small_default(family)
    ours = vramwise.estimate(cfg, profile="hf", method="lora", lora_rank=4, target_modules=targets)
    try:
        expected = _peft_count(cfg, targets, 4)
    except ValueError as e:  # PEFT finds no module to adapt (e.g. latent attention has no q_proj/v_proj)
        assert "not found in the base model" in str(e) or "did not match any" in str(e), e
        expected = 0
    assert ours.params_trainable == expected
