"""Skip lists matched on path templates count exactly what matching every concrete path counts."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vramwise
from vramwise.models.skiplists import _skip_matcher, _split_entries

REG = vramwise.Registry()
MOE = {"model_type": "qwen3_moe", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
       "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 4,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "mlp_only_layers": [1]}
GEMMA3N = {"model_type": "gemma3n_text", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "num_kv_shared_layers": 1}

SEGMENTS = ["model", "language_model", "layers", "0", "1", "2", "3", "7", "self_attn", "mlp", "experts", "q_proj",
            "k_proj", "gate_up_proj", "down_proj", "shared_expert", "lm_head", "embed_tokens", "altup_projections",
            "gate", "norm", "03", ""]


def brute_force(spec, entries) -> int:
    rooted, short = _split_entries(entries, spec.compiled_family.path_roots)
    matches = _skip_matcher(rooted, short, spec.compiled_family.path_roots[0])
    total = 0
    for _, indices, mods in spec.module_groups():
        for m in mods:
            if not m.quantizable:
                continue
            for i in (indices if indices is not None else (None,)):
                for p in m.paths(i):
                    if matches(p.rsplit(".", 1)[0] if m.kind == "parameter" else p):
                        total += m.weight_params // m.repeat
    return total


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from([MOE, GEMMA3N]),
       entries=st.lists(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=5).map(".".join), max_size=6))
def test_templates_count_what_paths_count(config, entries):
    spec = vramwise.load_model(dict(config, quantization_config={"llm_int8_skip_modules": entries}), registry=REG)
    assert spec.aggregates["skipped_quantizable_params"] == brute_force(spec, entries)


def test_a_long_skip_list():
    # 100,000 entries naming q_proj of layers 0..99,999; the model has 4 layers, each q_proj
    # (4 heads x 16) x 64 = 4,096 weights: 4 x 4,096 = 16,384 kept in 16 bit
    entries = [f"model.layers.{i}.self_attn.q_proj" for i in range(100_000)]
    spec = vramwise.load_model(dict(MOE, quantization_config={"llm_int8_skip_modules": entries}), registry=REG)
    assert spec.aggregates["skipped_quantizable_params"] == 4 * 4096
