"""Skip lists matched on path templates count exactly what matching every concrete path counts, and short
entries match as Unsloth Studio's estimator (and transformers before 5) match them: inside a path, at the
layer or deeper."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vramwise
from vramwise.models.skiplists import _layer_segment, _skip_matcher, _split_entries

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
    total = 0
    for _, indices, mods in spec.module_groups():
        for m in mods:
            if not m.quantizable:
                continue
            matches = _skip_matcher(rooted, short, spec.compiled_family.path_roots[0], _layer_segment(m.path))
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

@pytest.mark.parametrize("entries", [["1", "model.0"], ["model.0", "1"], ["0", "model.1", "2"],
                                     ["model.layers.1", "layers.3", "3"]])
def test_rooted_and_short_entries_of_one_shape_are_matched_apart(entries):
    """A short entry ("1") and an entry under the root ("model.0", relative "0") have the same shape, one
    number; each group's numbers are its own (the memo of matches is keyed by the group's list), so the count
    is what matching every concrete path gives (brute_force, the independent reading)."""
    spec = vramwise.load_model(dict(MOE, quantization_config={"llm_int8_skip_modules": entries}), registry=REG)
    assert spec.aggregates["skipped_quantizable_params"] == brute_force(spec, entries)



def test_a_long_skip_list():
    # 100,000 entries naming q_proj of layers 0..99,999; the model has 4 layers, each q_proj
    # (4 heads x 16) x 64 = 4,096 weights: 4 x 4,096 = 16,384 kept in 16 bit
    entries = [f"model.layers.{i}.self_attn.q_proj" for i in range(100_000)]
    spec = vramwise.load_model(dict(MOE, quantization_config={"llm_int8_skip_modules": entries}), registry=REG)
    assert spec.aggregates["skipped_quantizable_params"] == 4 * 4096



def test_entries_go_under_the_longest_root_they_start_with():
    roots = ("model", "model.language_model", "language_model")
    entries = ["model", "model.layers.0.mlp", "model.language_model.layers.1", "model.language_model",
               "language_model.norm", "models.layers.0", "lm_head", "model.", "", 7]
    rooted, short = _split_entries(entries, roots)
    # "model" and "model.language_model" are roots themselves (the whole tower: ""); the longest root
    # a dotted prefix names wins ("model.language_model.layers.1" -> "layers.1", not "language_model.layers.1");
    # "models" is not a root at a dot, "lm_head" names none; "model." is the root with an empty rest;
    # "" and 7 are no entries
    assert rooted == ["", "layers.0.mlp", "layers.1", "", "norm", ""]
    assert short == ["models.layers.0", "lm_head"]


def test_a_checkpoints_skip_list_is_read_once_per_model(monkeypatch):
    """The inventory and the checkpoint's format read the same llm_int8_skip_modules: one SkipList."""
    from vramwise.models import skiplists

    made = []
    real = skiplists.SkipList.__init__

    def counting(self, entries, roots):
        made.append(roots)
        real(self, entries, roots)

    monkeypatch.setattr(skiplists.SkipList, "__init__", counting)
    entries = [f"model.layers.{i}.self_attn.q_proj" for i in range(1000)]
    spec = vramwise.load_model(dict(MOE, quantization_config={"quant_method": "bitsandbytes", "load_in_4bit": True,
                                                              "llm_int8_skip_modules": entries}), registry=REG)
    assert len(made) == 1
    # as test_a_long_skip_list: 4 layers' q_proj, 4,096 weights each
    assert spec.aggregates["skipped_quantizable_params"] == 4 * 4096

# -- short entries, as the reference estimator reads them ------------------------------------------------------
# A config without model_type (the generic family): 3 layers of H 64, 4 heads of 16, 2 KV heads, MLP 96,
# vocabulary 100. Per layer, quantizable linear weights:
#   q 64 x 64 = 4,096, k and v 32 x 64 = 2,048 each, o 4,096     -> attention 12,288
#   gate, up, down 96 x 64 = 6,144 each                          -> MLP 18,432
#   layer                                                        -> 30,720
DENSE = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2}
ATTN, MLP, LAYER = 12_288, 18_432, 30_720


def _skipped(config: dict, entries: list) -> int:
    spec = vramwise.load_model(dict(config, quantization_config={"load_in_4bit": True, "llm_int8_skip_modules": entries}),
                               registry=REG)
    return spec.aggregates["skipped_quantizable_params"]


@pytest.mark.parametrize("entries, expected", [
    (["layers.2"], LAYER),                            # a layer without its root: layer 2 whole
    (["self_attn"], 3 * ATTN),                        # a block's name: that block of every layer
    (["mlp"], 3 * MLP),
    (["2.mlp"], MLP),                                 # a run of segments ending at the block: layer 2's MLP
    (["layers.2", "self_attn"], LAYER + 2 * ATTN),    # layer 2's attention is counted once
    (["self_attn.q_proj"], 3 * 4096),                 # a suffix, as before
    (["layers"], 0),                                  # ends before the layer's index: the layer list, no module
    (["yers.2"], 0),                                  # not a whole segment
    (["vision_tower", "embed_tokens"], 0),            # another tower; a module the load keeps in 16 bit anyway
])
def test_short_entries_match_inside_paths(entries, expected):
    assert _skipped(DENSE, entries) == expected


@pytest.mark.parametrize("entries, expected", [
    # transformers 5 (quantizers_utils.py:26-37 should_convert_module): an entry matches from a path's start up to a
    # module boundary, or as the path's end
    (["layers.2"], 0),                                # neither the start nor the end of any module path
    (["self_attn"], 0),
    (["self_attn.q_proj"], 3 * 4096),                 # the end of each layer's q_proj path
    (["q_proj"], 3 * 4096),
    (["model.layers.2"], LAYER),                      # the start of layer 2's paths
    (["layers.2", "self_attn", "model.layers.1"], LAYER),
])
def test_transformers_5_matches_only_at_a_paths_start_or_end(entries, expected):
    spec = vramwise.load_model(dict(DENSE, quantization_config={"load_in_4bit": True, "llm_int8_skip_modules": entries}),
                               registry=REG)
    assert spec.aggregates["skipped_quantizable_params_v5"] == expected


@pytest.mark.parametrize("profile", ["hf", "unsloth"])
def test_the_stacks_read_the_skip_list_as_transformers_5_does(profile):
    # QLoRA: nn.Linear weights at NF4 (0.5 byte + the absmax scales), the skipped ones at 16 bit. "self_attn"
    # skips nothing under transformers 5, so the weights equal those without a skip list; "model.layers.2"
    # skips layer 2's 30,720 weights under both readings, so the two entries give the same weights
    def weights(entries):
        cfg = dict(DENSE, quantization_config={"load_in_4bit": True, "llm_int8_skip_modules": entries})
        return vramwise.estimate(cfg, profile=profile, method="qlora").weights
    assert weights(["self_attn"]) == weights([])
    assert weights(["layers.2"]) == weights([])
    assert weights(["model.layers.2"]) > weights([])
    # the studio profile, as Unsloth Studio's estimator (transformers 4.x's matching): self_attn keeps 3 x 12,288
    # weights in 16 bit, each adding 2 - 2 / 3.2 = 1.375 bytes: 36,864 x 1.375 = 50,688 bytes
    cfg = dict(DENSE, quantization_config={"load_in_4bit": True, "llm_int8_skip_modules": ["self_attn"]})
    assert (vramwise.estimate(cfg, profile="studio", method="qlora").weights
            - vramwise.estimate(DENSE, profile="studio", method="qlora").weights) == 50_688


def test_a_mixed_skip_list_of_the_reference_fixtures_shape():
    # 4 layers of H 64, 4 heads of 16, 2 KV heads, MLP 96; the last 2 layers share K/V (no k/v projections)
    # with a double-wide MLP (192); per-layer inputs of 8 (a gate 8 x 64 and a projection 64 x 8 per layer).
    #   model.layers.0.self_attn.q_proj      q of layer 0: 64 x 64                        4,096
    #   language_model.model.layers.1.mlp    layer 1's MLP: 3 x 96 x 64                  18,432
    #   layers.2                             layer 2: q and o 2 x 4,096, MLP 3 x 192 x 64,
    #                                        gate and projection 2 x 512                 46,080
    #   vision_tower, embed_tokens           another tower; a table kept in 16 bit anyway     0
    config = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_kv_shared_layers": 2,
              "use_double_wide_mlp": True, "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 50}
    entries = ["model.layers.0.self_attn.q_proj", "language_model.model.layers.1.mlp", "layers.2", "vision_tower",
               "embed_tokens"]
    assert _skipped(config, entries) == 4_096 + 18_432 + 46_080


def test_a_wider_skip_covers_what_a_narrower_one_does():
    layer, block, module = (_skipped(DENSE, [e]) for e in ("layers.1", "layers.1.self_attn", "layers.1.self_attn.q_proj"))
    assert (layer, block, module) == (LAYER, ATTN, 4096)
    assert _skipped(DENSE, ["layers.1", "layers.1.self_attn", "layers.1.self_attn.q_proj"]) == LAYER
    for rooted in ("model.layers.1", "language_model.model.layers.1"):
        assert _skipped(DENSE, [rooted]) == LAYER


def test_a_skip_adds_its_weights_at_16_bit():
    # QLoRA weights (studio profile): quantizable x 2 / 3.2 + the rest x 2; a skipped weight moves from the first
    # group to the second, adding 2 - 2 / 3.2 = 1.375 bytes: layer 2 skipped adds 30,720 x 1.375 = 42,240 bytes
    config = dict(DENSE, quantization_config={"load_in_4bit": True, "llm_int8_skip_modules": ["layers.2"]})
    plain = vramwise.estimate(DENSE, profile="studio", method="qlora").weights
    skipped = vramwise.estimate(config, profile="studio", method="qlora").weights
    assert skipped - plain == 42_240


# enable_moe_block (Gemma 4's layout): 2 layers of H 64, dense MLP 32, 4 experts of 16. Per layer:
#   dense MLP 3 x 32 x 64 = 6,144; experts 4 x 3 x 16 x 64 = 12,288; router 4 x 64 = 256
# transformers' Gemma 4 layer holds self.mlp, self.router and self.experts side by side
PARALLEL = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 32, "moe_intermediate_size": 16,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_experts": 4, "top_k_experts": 2,
            "enable_moe_block": True}


def test_parallel_experts_sit_beside_the_mlp():
    paths = set(vramwise.load_model(PARALLEL, registry=REG).module_params())
    assert {"model.layers.0.experts.gate_up_proj", "model.layers.0.experts.down_proj", "model.layers.0.router.proj",
            "model.layers.0.mlp.gate_proj"} <= paths
    assert not [p for p in paths if ".mlp.experts" in p or p.endswith(".mlp.gate")]
    assert _skipped(PARALLEL, ["model.layers.0.mlp"]) == 6_144      # the dense block only
    assert _skipped(PARALLEL, ["model.layers.0.experts"]) == 12_288
    # the whole layer adds the router and the attention (4 KV heads as the query heads: q, k, v, o 64 x 64 each)
    assert _skipped(PARALLEL, ["model.layers.0"]) == 6_144 + 12_288 + 256 + 4 * 4_096


# Shared experts (2 layers of H 64, 4 experts of 16, both MoE). Sized on their own
# (shared_expert_intermediate_size 48), one Qwen2-MoE shared expert: mlp.shared_expert, 3 x 48 x 64 = 9,216
# weights in its projections; otherwise DeepSeek's fused mlp.shared_experts (n_shared_experts 2: 2 x 16 = 32
# wide, 3 x 32 x 64 = 6,144).
MOE_BASE = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 32, "moe_intermediate_size": 16,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_experts": 4, "num_experts_per_tok": 2}


def test_shared_expert_names_follow_transformers():
    qwen = dict(MOE_BASE, shared_expert_intermediate_size=48)
    deepseek = dict(MOE_BASE, n_shared_experts=2)
    qwen_paths = set(vramwise.load_model(qwen, registry=REG).module_params())
    deepseek_paths = set(vramwise.load_model(deepseek, registry=REG).module_params())
    assert "model.layers.1.mlp.shared_expert.gate_proj" in qwen_paths
    assert "model.layers.1.mlp.shared_expert_gate" in qwen_paths
    assert not [p for p in qwen_paths if ".shared_experts." in p]
    assert "model.layers.1.mlp.shared_experts.gate_proj" in deepseek_paths
    assert _skipped(qwen, ["mlp.shared_expert"]) == 2 * 9_216
    assert _skipped(deepseek, ["mlp.shared_experts"]) == 2 * 6_144
