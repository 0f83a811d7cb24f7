"""Every dense config of ../shared/configs against a direct transcription of the formulas of the studio
profile (the reference estimator's arithmetic).

The oracle below is written from docs/unsloth-profile.md (#total to #overhead), not from the YAML files: it
takes the exact parameter split from transformers' meta-device model (linear weights inside the
decoder layers are quantizable; everything else is not) and applies that arithmetic.
"""

from __future__ import annotations

import json

import pytest

from helpers import require_installed

require_installed("torch")  # imported by the tests that use it

import vramwise  # noqa: E402
from helpers import every_nth, from_shared, shared_configs, slow_unless  # noqa: E402

DENSE_TYPES = {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text", "gemma3"}
CONFIGS = shared_configs(DENSE_TYPES)
OPT_BPP = {"adamw_8bit": 4, "adamw_torch": 6, "paged_adamw_32bit": 8, "sgd": 4}
SEVEN = {"q_proj": ("q", "h"), "k_proj": ("kv", "h"), "v_proj": ("kv", "h"), "o_proj": ("h", "q"),
         "gate_proj": ("m", "h"), "up_proj": ("m", "h"), "down_proj": ("h", "m")}


def _split(cfg: dict) -> tuple[int, int]:
    """(quantizable, non-quantizable) parameters of the meta-device model."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    d = dict(cfg.get("text_config") or cfg) if cfg.get("model_type") == "gemma3" else dict(cfg)
    mt = d.pop("model_type", "gemma3_text")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(mt, **d))
    quant = other = 0
    for name, p in model.named_parameters():
        if ".layers." in name and name.endswith(".weight") and p.dim() == 2:
            quant += p.numel()
        else:
            other += p.numel()
    return quant, other


def _oracle(cfg: dict, method: str, gc: str, opt: str, attention: str, B=4, S=2048, r=16) -> dict:
    t = cfg.get("text_config") or cfg
    H, L, heads = t["hidden_size"], t["num_hidden_layers"], t["num_attention_heads"]
    kvh = t.get("num_key_value_heads") or heads
    defaults_hd = {"qwen3": 128, "gemma2": 256, "gemma3_text": 256, "gemma3": 256}
    hd = t.get("head_dim") or defaults_hd.get(t.get("model_type", cfg["model_type"]), H // heads)
    M = t["intermediate_size"]
    dims = {"h": H, "q": heads * hd, "kv": kvh * hd, "m": M}
    quant, other = _split(cfg)
    total = quant + other
    if method == "qlora":
        weights = quant * 2 / 3.2 + other * 2                      # section 1
    else:
        weights = total * 2
    lora_params = 0 if method == "full" else sum(r * (dims[a] + dims[b]) for a, b in SEVEN.values()) * L  # section 2
    trainable = total if method == "full" else lora_params
    optimizer = trainable * OPT_BPP[opt]                            # section 3
    per_layer = (S * B * (dims["q"] + 2 * dims["kv"]) + S * B * 2 + S * B * 2 * M) * 2 * 1.25   # section 5
    mult = {"none": L, "true": 2.0 if method == "full" else 1.0, "unsloth": 1.5 if method == "full" else 1.0}[gc]
    act = per_layer * L if gc == "none" else per_layer * mult
    if attention not in ("flash_attention_2", "sdpa", "flex_attention"):
        act = max(act, B * heads * S * S * 2 * 12.0 * mult)
    raw_grad = trainable * 2                                        # section 4
    floor = weights * 0.15 if method == "full" else min(weights * 0.15, max(act, optimizer))   # section 6
    grads = max(raw_grad, floor)
    overhead = 1.4 * 1024**3                                        # section 7
    return {"weights": weights, "lora": lora_params * 2, "optimizer": optimizer, "gradients": grads,
            "activations": act, "overhead": overhead}


SETTINGS = [
    ("qlora", "unsloth", "adamw_8bit", "flash_attention_2"),
    ("lora", "none", "adamw_torch", "sdpa"),
    ("full", "true", "paged_adamw_32bit", "eager"),
]


# the default run: every fourth config by name; .ci/run's slow tier: the others
@pytest.mark.parametrize("name,path", from_shared(slow_unless([pytest.param(n, p, id=n) for n, p in CONFIGS], every_nth(4)),
                                                  2))
def test_shared_dense_config_matches_seed(name, path):
    cfg = json.loads(path.read_text())
    spec = vramwise.load_model(cfg)
    for method, gc, opt, attn in SETTINGS:
        e = vramwise.estimate(spec, profile="studio", method=method, gradient_checkpointing=gc, optimizer=opt,
                              attention=attn)
        want = _oracle(cfg, method, gc, opt, attn)
        for comp, value in want.items():
            assert getattr(e, comp) == pytest.approx(value, abs=1), (name, method, comp)
