"""Inputs the reference estimator accepts are accepted, with its reading (a value of 0 meaning a feature is
absent), not refused by a bound added for robustness."""

from __future__ import annotations

import pytest

import vramwise

GEMMA4 = {"model_type": "gemma4_text", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "hidden_size_per_layer_input": 8}
UNKNOWN = {"model_type": "some_new_arch", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size_per_layer_input": 8}


@pytest.mark.parametrize("config", [GEMMA4, UNKNOWN], ids=["gemma4", "generic"])
def test_a_per_layer_embedding_table_of_zero_rows(config):
    none = vramwise.estimate({**config, "vocab_size_per_layer_input": 0})
    fifty = vramwise.estimate({**config, "vocab_size_per_layer_input": 50})
    # the table is vocab_size_per_layer_input x (num_hidden_layers * hidden_size_per_layer_input):
    # 50 x (2 * 8) = 800 parameters, and 0 rows hold none; every other module is the same
    assert fifty.params_total - none.params_total == 50 * 2 * 8
    assert none.total > 0


LLAMA = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
         "num_hidden_layers": 2, "num_attention_heads": 4}


@pytest.mark.parametrize("model_type", ["llama", "some_new_arch"])
def test_a_per_layer_intermediate_size_list_counts_as_its_largest_width(model_type):
    scalar = vramwise.estimate({**LLAMA, "model_type": model_type})
    listed = vramwise.estimate({**LLAMA, "model_type": model_type, "intermediate_size": [96, 128]})
    # read as 128: each layer's gate, up and down projections grow by 3 x 64 x (128 - 96) = 6,144 parameters,
    # 12,288 over the two layers
    assert listed.params_total - scalar.params_total == 3 * 64 * (128 - 96) * 2


def test_gemma3n_still_reads_its_list_layer_by_layer():
    base = {"model_type": "gemma3n_text", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_kv_shared_layers": 0}
    listed = vramwise.estimate({**base, "intermediate_size": [32, 48, 64]})
    widest = vramwise.estimate({**base, "intermediate_size": [64, 64, 64]})
    # layer by layer: layers 0 and 1 are narrower than 64 by 32 and 16, each width in three projections of 64
    assert widest.params_total - listed.params_total == 3 * 64 * (32 + 16)


# --- 0, null and lists the reference reads as "absent" or as one value -----------------------------------------
# The seed (/work/shared/seed/vram-estimator-seed.txt) is cited by its line-1 change list ("*"-separated items)
# and by the sections of its formula reference.


def _total(config, **settings):
    return vramwise.estimate(config, **settings).total


def test_head_dim_zero_is_the_legacy_head_width():
    # Seed, formula reference "Symbols": K = (H / num_attention_heads) * num_key_value_heads, the legacy width the
    # reference keeps when no head_dim is given; line 1, item "tighten VRAM estimator structured-shape ...": head_dim
    # feeds the structured shapes, "instead of using the legacy hidden_size//num_attention_heads" shape. A head_dim of
    # 0 gives no width, so the legacy one applies. transformers 5's own Glm5NextTextConfig defaults head_dim to 0.
    zero = vramwise.estimate({**LLAMA, "model_type": "some_new_arch", "num_key_value_heads": 2, "head_dim": 0})
    legacy = vramwise.estimate({**LLAMA, "model_type": "some_new_arch", "num_key_value_heads": 2, "head_dim": 64 // 4})
    assert zero.model.facts["head_dim"] == 64 // 4
    assert zero.params_total == legacy.params_total


def test_the_default_glm5_next_config_of_transformers():
    transformers = pytest.importorskip("transformers")
    config = transformers.CONFIG_MAPPING["glm5_next_text"]().to_dict()
    assert config["head_dim"] == 0  # the class default this test is about
    est = vramwise.estimate(config)
    # multi-head latent attention, so the head width only sizes nothing but the legacy activation widths:
    # 4096 // 64 = 64
    assert est.model.facts["head_dim"] == config["hidden_size"] // config["num_attention_heads"]


GPT_OSS = {"model_type": "gpt_oss", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 32,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
           "num_experts_per_tok": 2}


def test_gpt_oss_with_a_null_head_dim():
    # A null head_dim was refused while evaluating q_dim. transformers' GptOssConfig.__init__ sets
    # head_dim = hidden_size // num_attention_heads when it is None, and the reference (seed, "Symbols": K from
    # H / num_attention_heads) reads the same legacy width: 64 // 4 = 16
    null = vramwise.estimate({**GPT_OSS, "head_dim": None})
    given = vramwise.estimate({**GPT_OSS, "head_dim": 16})
    assert null.model.facts["head_dim"] == 16
    assert null.params_total == given.params_total


NEW = {"model_type": "some_new_arch", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
       "num_hidden_layers": 2, "num_attention_heads": 4}


@pytest.mark.parametrize("field", ["num_kv_shared_layers", "hidden_size_per_layer_input"])
def test_a_null_layer_shape_count_means_none(field):
    # Seed, formula reference section 2 ("Some decoder configs expose layer-shape fields such as ...
    # num_kv_shared_layers ... hidden_size_per_layer_input. When those fields are present ..."): a null field is not
    # present, so the uniform layer applies, as with the field left out (it failed evaluating the layer rules)
    assert _total({**NEW, field: None}) == _total(NEW)


MOE = {**NEW, "num_experts": 4, "moe_intermediate_size": 16, "num_experts_per_tok": 2}


@pytest.mark.parametrize("alias", ["num_experts_per_tok", "top_k_experts", "moe_top_k", "moe_topk"])
def test_top_k_zero_is_no_top_k(alias):
    # Seed line 1, item "top-k MoE activations": the reference "extracts it from num_experts_per_tok / top_k_experts
    # (Gemma4 alias)", item "MoE top-k aliases": it "probe[s] both" moe_top_k and moe_topk; a 0 gives no top-k, so
    # the next alias, else one expert per token, as when none is given (docs/unsloth-profile.md#moe)
    base = {k: v for k, v in MOE.items() if k != "num_experts_per_tok"}
    assert _total({**base, alias: 0}) == _total(base)
    if alias != "num_experts_per_tok":
        assert _total({**base, "num_experts_per_tok": 0, alias: 2}) == _total(MOE)


@pytest.mark.parametrize("value", [0, None])
def test_decoder_sparse_step_zero_or_null_makes_every_layer_moe(value):
    # Seed line 1, item "non-prefix dense layer support": dense layers come "from first_k_dense_replace or
    # decoder_sparse_step + mlp_only_layers"; a step of 0 or none selects no dense layer, so every layer routes
    # (the default step of 1 does the same); it was refused by a bound of at least 1, or failed on null
    assert _total({**MOE, "decoder_sparse_step": value}) == _total({**MOE, "decoder_sparse_step": 1})


def test_null_mlp_only_layers_is_an_empty_list():
    # the same item: mlp_only_layers lists dense layers; null lists none (it failed evaluating mlp_kind)
    assert _total({**MOE, "mlp_only_layers": None}) == _total({**MOE, "mlp_only_layers": []})


@pytest.mark.parametrize("value", [0, None])
def test_an_ernie_range_without_interval_is_not_used(value):
    # Seed line 1, item "ERNIE position dispatch": ERNIE configs "declare MoE layers via moe_layer_start_index /
    # moe_layer_end_index / moe_layer_interval"; without an interval (0 or null) that rule gives no layer and the next
    # rule decides (here none: every layer routes). It was refused by a bound of at least 1, or failed on null
    ernie = {**MOE, "moe_layer_start_index": 1, "moe_layer_interval": value}
    assert _total(ernie) == _total(MOE)


def test_interleave_step_zero_is_not_used():
    # Seed line 1, item "extend MoE family extraction": Llama 4's MoE layers are "config.moe_layers (auto-populated
    # from interleave_moe_layer_step)"; a step of 0 populates none, so the rule is not used (refused by a bound of 1)
    assert _total({**MOE, "interleave_moe_layer_step": 0}) == _total(MOE)


def test_intermediate_size_mlp_zero_keeps_the_dense_width():
    # Seed line 1, item "extend MoE family extraction": "a separate dense_intermediate_size derived from
    # intermediate_size_mlp (used for the dense feed_forward path) and keep intermediate_size for the routed/shared
    # expert width"; a width of 0 gives none, so dense layers keep intermediate_size (it was refused by a bound of 1)
    dense = {**NEW, "intermediate_size_mlp": 0}
    assert _total(dense) == _total(NEW)


def test_max_position_embeddings_zero_is_unknown():
    # the reference reads no position count at all (seed, formula reference: every term is in H, L, V, K, M, E, r,
    # B and S); 0 is read as the field left out, not refused by a bound of at least 1
    assert _total({**NEW, "max_position_embeddings": 0}) == _total(NEW)


@pytest.mark.parametrize("alias", ["num_local_experts", "num_experts", "n_routed_experts"])
def test_an_expert_count_list_counts_by_its_first_entry(alias):
    # Seed line 1, item "ERNIE list configs": "a _first_scalar helper for ERNIE-style moe_intermediate_size =
    # [routed, shared] lists, plus moe_num_experts and moe_num_shared_experts attribute aliases"; the reference
    # reads every expert-count alias through it, so a list counts as its first entry
    base = {k: v for k, v in MOE.items() if k != "num_experts"}
    assert _total({**base, alias: [4, 2]}) == _total({**base, alias: 4})


@pytest.mark.parametrize("alias", ["n_shared_experts", "num_shared_experts", "moe_num_shared_experts"])
def test_a_shared_expert_count_list_counts_by_its_first_entry(alias):
    # the same item: moe_num_shared_experts and its aliases ([routed, shared] lists) are read by their first entry
    assert _total({**MOE, alias: [1, 2]}) == _total({**MOE, alias: 1})


def test_an_intermediate_size_mlp_list_counts_by_its_first_entry():
    # Seed line 1, item "extend MoE family extraction": intermediate_size_mlp sizes the dense layers; the reference
    # takes one value of a list (its first, as for every list it reads through _first_scalar)
    llama4ish = {**MOE, "intermediate_size_mlp": [128, 64], "moe_layers": [1]}
    assert _total(llama4ish) == _total({**llama4ish, "intermediate_size_mlp": 128})


@pytest.mark.parametrize("field, value", [("hidden_size", -64), ("num_hidden_layers", "2"), ("vocab_size", 0),
                                          ("num_attention_heads", 0), ("intermediate_size", -1)])
def test_values_the_reference_cannot_read_stay_errors(field, value):
    # negative sizes and strings where numbers go fail the reference's arithmetic too; with no attention heads it
    # reads no architecture at all (docs/unsloth-profile.md#untyped-configs: it falls back to the model's size),
    # and a vocabulary of 0 rows is no language model: each stays an error naming the field
    with pytest.raises(vramwise.ConfigError, match=field):
        vramwise.estimate({**NEW, field: value})
