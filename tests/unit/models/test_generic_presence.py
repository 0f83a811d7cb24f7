"""The generic family applies the decoder rules whose fields a config carries, and says so.

A config without ``model_type`` (or with one no family serves) is read by the generic family.
Where the fields of a rule another family owns are present (Llama 4's dense ``intermediate_size_mlp``
beside experts with a shared expert, MoE layer selection, KV-shared layers, double-wide MLPs,
per-layer embeddings), the rule applies and a warning names it. The reference here is transformers'
own model of the type the fields come from, built on the meta device with ``model_type`` known,
while vramwise sees the same config without it. The hand-derived case for KV sharing, the
double-wide MLP and per-layer embeddings is the last example of families/generic.yaml.
"""

from __future__ import annotations

import json

import pytest

from helpers import require_installed

require_installed("torch", "transformers")  # imported by the tests (helpers.reference_params)

import vramwise  # noqa: E402
from helpers import by_kind, reference_params  # noqa: E402

CASES = {
    # Llama 4 layout: MoE every 2nd layer (layers 1 and 3), experts of intermediate_size 32 with one
    # shared expert of 32, dense layers of intermediate_size_mlp 96
    "llama4-interleaved": ("llama4_text", dict(
        vocab_size=1000, hidden_size=64, intermediate_size=32, intermediate_size_mlp=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4, interleave_moe_layer_step=2,
        tie_word_embeddings=False)),
    # DeepSeek-style MoE by aliases: first layer dense, two shared experts
    "deepseek-first-k-dense": ("deepseek_v3", dict(
        vocab_size=1000, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, n_routed_experts=4,
        num_experts_per_tok=2, n_shared_experts=2, first_k_dense_replace=1, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=16, n_group=1, topk_group=1, tie_word_embeddings=False)),
}


def _config(model_type: str, fields: dict) -> dict:
    from transformers import AutoConfig

    return json.loads(AutoConfig.for_model(model_type, **fields).to_json_string(use_diff=False))


@pytest.mark.parametrize("case", sorted(CASES))
def test_rules_by_field_presence_match_transformers(case):
    model_type, fields = CASES[case]
    cfg = _config(model_type, fields)
    ref = reference_params(cfg)
    anonymous = {k: v for k, v in cfg.items() if k != "model_type"}
    spec = vramwise.load_model(anonymous)
    assert spec.rules.name == "generic"
    assert spec.params_total == sum(ref.values())
    assert {k: v for k, v in spec.params_by_group.items() if v} == by_kind(ref)


def test_each_rule_applied_is_named():
    model_type, fields = CASES["llama4-interleaved"]
    spec = vramwise.load_model({k: v for k, v in _config(model_type, fields).items() if k != "model_type"})
    text = " ".join(spec.warnings)
    assert "no model_type" in text
    assert "intermediate_size_mlp (96)" in text
    assert "mixture of experts (4 experts" in text
    assert "KV-shared" not in text and "per-layer embeddings" not in text  # fields absent: rules silent


def test_an_unknown_model_type_gets_the_same_rules():
    model_type, fields = CASES["llama4-interleaved"]
    cfg = _config(model_type, fields)
    ref = reference_params(cfg)
    spec = vramwise.load_model({**cfg, "model_type": "not_a_known_type"})
    assert spec.rules.name == "generic"
    assert spec.params_total == sum(ref.values())


def test_a_dense_config_applies_no_rule():
    spec = vramwise.load_model({"vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
                                "num_hidden_layers": 2, "num_attention_heads": 4})
    assert not [w for w in spec.warnings if w.startswith("applied by field presence")]


# Gemma-4-shaped fields without model_type (the shape of the reference estimator's own structured fixtures):
# transformers' gemma4_text model of the same fields is the reference for every linear and expert weight
# (Gemma 4's own norms, scales and per-layer scalars are not fields the generic family reads).
GEMMA4_SHAPED = dict(
    vocab_size=128, hidden_size=64, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, global_head_dim=16, num_global_key_value_heads=1, attention_k_eq_v=True,
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    hidden_size_per_layer_input=0, tie_word_embeddings=True)
GEMMA4_MOE = dict(GEMMA4_SHAPED, enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=16)
_WEIGHTS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "gate_up_proj", "router.proj")


def _linear_and_expert_weights(per_module: dict) -> dict:
    return {p: n for p, n in per_module.items() if p.endswith(_WEIGHTS)}


@pytest.mark.parametrize("fields", [GEMMA4_SHAPED, dict(GEMMA4_SHAPED, attention_k_eq_v=False), GEMMA4_MOE],
                         ids=["k-eq-v", "own-v", "parallel-experts"])
def test_gemma4_shaped_fields_match_transformers_gemma4(fields):
    ref = _linear_and_expert_weights(reference_params({"model_type": "gemma4_text", **fields}))
    spec = vramwise.load_model(dict(fields))
    assert spec.rules.name == "generic"
    assert _linear_and_expert_weights(spec.module_params()) == ref
    text = " ".join(spec.warnings)
    assert "global_head_dim (16)" in text
    assert ("keys as values" in text) == fields["attention_k_eq_v"]


def test_qwen2_moe_fields_match_transformers_qwen2_moe():
    # Qwen2-MoE's shared expert sized on its own (mlp.shared_expert with its gate); q/k/v without the
    # bias Qwen2-MoE names qkv_bias (a field the generic family does not read), layer 1 dense by mlp_only_layers
    fields = dict(vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                  shared_expert_intermediate_size=48, decoder_sparse_step=1, mlp_only_layers=[1], qkv_bias=False,
                  tie_word_embeddings=False)
    ref = reference_params({"model_type": "qwen2_moe", **fields})
    spec = vramwise.load_model(dict(fields))
    assert spec.rules.name == "generic"
    assert spec.module_params() == ref
