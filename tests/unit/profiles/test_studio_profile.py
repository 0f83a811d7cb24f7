"""The studio profile reproduces the estimator's formulas of docs/unsloth-profile.md (which the unsloth profile
kept until it modelled Unsloth's own stack); expected values are derived by hand.

Llama-3.1-8B dims used throughout (H 4096, 32 layers, 32 heads of 128, 8 KV heads, MLP 14336,
vocabulary 128256, untied):
  attention linears per layer  2*4096*4096 + 2*1024*4096           = 41,943,040
  MLP linears per layer        3*14336*4096                        = 176,160,768
  quantizable (32 layers)      32 * (41,943,040 + 176,160,768)     = 6,979,321,856
  embeddings + lm_head         2 * 128256*4096                     = 1,050,673,152
  norms                        32*2*4096 + 4096                    = 266,240
  total                                                            = 8,030,261,248
  non-quantizable              1,050,673,152 + 266,240             = 1,050,939,392
  LoRA in+out per layer (7 projections)
      q 4096+4096, k 4096+1024, v 4096+1024, o 4096+4096,
      gate/up 4096+14336 each, down 14336+4096                     = 81,920
  one layer's activations (B 4, S 2048, seq section 5)
      S*B = 8192; (8192*(4096 + 2*1024) + 8192*2 + 8192*2*14336) * 2 * 1.25
      = 8192 * 34818 * 2.5                                         = 713,072,640
  CUDA overhead 1.4 GiB = 1.4 * 1073741824 = 1,503,238,553.6       -> 1,503,238,554
"""

from __future__ import annotations

import pytest

import vramwise

LLAMA_8B = {
    "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
}
QUANTIZABLE = 6_979_321_856
NON_QUANTIZABLE = 1_050_939_392
TOTAL_PARAMS = 8_030_261_248
LAYER_ACT = 713_072_640
OVERHEAD = 1_503_238_554


def _studio(model, **settings):
    return vramwise.estimate(model, profile="studio", **settings)

def test_qlora_defaults_llama_8b():
    e = _studio(LLAMA_8B)
    # weights: 6,979,321,856 * 2 / 3.2 + 1,050,939,392 * 2 = 4,362,076,160 + 2,101,878,784
    assert e.weights == 6_463_954_944
    # LoRA r=16: 16 * 32 layers * 81,920 = 41,943,040 params, 2 bytes each
    assert e.params_trainable == 41_943_040
    assert e.lora == 83_886_080
    # adamw_8bit: 4 bytes per trainable parameter
    assert e.optimizer == 167_772_160
    # unsloth checkpointing, LoRA: 1.0 x the largest layer
    assert e.activations == LAYER_ACT
    # raw 2 * 41,943,040 = 83,886,080; floor min(0.15 * 6,463,954,944, max(713,072,640, 167,772,160)) = 713,072,640
    assert e.gradients == 713_072_640
    assert e.overhead == OVERHEAD
    assert e.total == 6_463_954_944 + 83_886_080 + 167_772_160 + 713_072_640 + LAYER_ACT + OVERHEAD
    assert e.params_total == TOTAL_PARAMS
    assert e.family == "llama" and e.profile == "studio" and not e.warnings


def test_full_finetune_adamw_torch_hf_checkpointing():
    e = _studio(LLAMA_8B, method="full", optimizer="adamw_torch", gradient_checkpointing="true")
    assert e.weights == TOTAL_PARAMS * 2 == 16_060_522_496
    assert e.lora == 0
    assert e.params_trainable == TOTAL_PARAMS
    assert e.optimizer == TOTAL_PARAMS * 6 == 48_181_567_488
    # raw 2 bytes per parameter beats the floor 0.15 * 16,060,522,496
    assert e.gradients == 16_060_522_496
    # transformers checkpointing, full fine-tuning: 2.0 x the largest layer
    assert e.activations == 2 * LAYER_ACT == 1_426_145_280


def test_full_finetune_unsloth_checkpointing_multiplier():
    e = _studio(LLAMA_8B, method="full")
    assert e.activations == 1.5 * LAYER_ACT == 1_069_608_960


def test_no_checkpointing_sums_every_layer():
    e = _studio(LLAMA_8B, method="lora", gradient_checkpointing="none")
    assert e.activations == 32 * LAYER_ACT == 22_818_324_480
    assert e.weights == TOTAL_PARAMS * 2  # 16-bit LoRA base


@pytest.mark.parametrize("gc,effective", [("unsloth", 1.0), ("true", 1.0), ("none", 32)])
def test_eager_attention_quadratic_term(gc, effective):
    e = _studio(LLAMA_8B, attention="eager", gradient_checkpointing=gc)
    # B * heads * S^2 * 2 * 12 * effective layers = 4 * 32 * 2048^2 * 24 * eff = 12,884,901,888 * eff
    quadratic = 4 * 32 * 2048 * 2048 * 2 * 12 * effective
    per_layer = LAYER_ACT * (32 if gc == "none" else 1)
    assert e.activations == max(quadratic, per_layer)
    assert e.activations == 12_884_901_888 * effective


@pytest.mark.parametrize("attn", ["sdpa", "flex_attention", "flash_attention_2"])
def test_memory_efficient_kernels_have_no_quadratic_term(attn):
    assert _studio(LLAMA_8B, attention=attn).activations == LAYER_ACT


def test_double_quant_factor():
    cfg = {**LLAMA_8B, "quantization_config": {"load_in_4bit": True, "bnb_4bit_use_double_quant": True}}
    e = _studio(cfg)
    # 6,979,321,856 * 2 / 3.6 = 3,877,401,031.11 ; + 2,101,878,784 = 5,979,279,815.11
    assert e.weights == 5_979_279_815


@pytest.mark.parametrize(
    "name,bpp",
    [("adamw_8bit", 4), ("paged_adamw_8bit", 4), ("adamw_bnb_8bit", 4), ("adamw_torch", 6),
     ("adamw_torch_fused", 6), ("paged_adamw_32bit", 8), ("sgd", 4), ("ADAMW-TORCH", 6), ("Paged-AdamW-32bit", 8)],
)
def test_optimizer_table(name, bpp):
    e = _studio(LLAMA_8B, optimizer=name)
    assert e.optimizer == 41_943_040 * bpp
    assert not e.warnings


def test_unknown_optimizer_warns_and_assumes_4():
    e = _studio(LLAMA_8B, optimizer="lion_32bit")
    assert e.optimizer == 41_943_040 * 4
    assert any("lion_32bit" in w for w in e.warnings)


def test_lora_floor_is_capped_by_activations_and_optimizer():
    e = _studio(LLAMA_8B, batch_size=1, seq_len=128)
    # activations: S*B = 128; 128 * 34818 * 2.5 = 11,141,760
    assert e.activations == 11_141_760
    # floor = min(0.15 * 6,463,954,944, max(11,141,760, 167,772,160)) = 167,772,160 > raw 83,886,080
    assert e.gradients == 167_772_160


def test_min_per_gpu():
    e = _studio(LLAMA_8B)
    state = 6_463_954_944 + 83_886_080 + 167_772_160 + 713_072_640
    assert e.min_per_gpu(1) == e.total
    # (weights + LoRA + optimizer + gradients) / 2 + activations + overhead
    assert e.min_per_gpu(2) == state // 2 + LAYER_ACT + OVERHEAD
    assert e.min_per_gpu(4) == state // 4 + LAYER_ACT + OVERHEAD
    with pytest.raises(vramwise.SettingsError):
        e.min_per_gpu(0)


PHI35 = {"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
         "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32}


def test_fused_projections_sized_as_split():
    e = _studio(PHI35)
    # per layer: q, k, v, o 3072+3072 each; gate, up 3072+8192 each; down 8192+3072
    # = 4 * 6144 + 3 * 11264 = 58,368 ; * 32 layers * r 16 = 29,884,416
    assert e.params_trainable == 29_884_416
    assert set(e.lora_targets) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_fused_projection_by_its_own_name():
    e = _studio(PHI35, target_modules=["qkv_proj"])
    # one adapter over the whole qkv_proj: 3072 in + 9216 out, * 32 layers * 16
    assert e.params_trainable == 32 * (3072 + 9216) * 16 == 6_291_456


@pytest.mark.parametrize("targets", ["all-linear", "all_linear", "ALL-LINEAR", ["all-linear"], None])
def test_all_linear_spellings(targets):
    assert _studio(LLAMA_8B, target_modules=targets).params_trainable == 41_943_040


def test_attention_only_targets():
    e = _studio(LLAMA_8B, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_rank=8)
    # (8192 + 5120 + 5120 + 8192) * 32 * 8
    assert e.params_trainable == 26624 * 32 * 8 == 6_815_744


def test_unknown_target_warns():
    e = _studio(LLAMA_8B, target_modules="q_proj,wq")
    assert e.params_trainable == 32 * 8192 * 16
    assert any("wq" in w for w in e.warnings)


QWEN25_7B = {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
             "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "tie_word_embeddings": False}


def test_biases_stay_16bit_under_4bit():
    e = _studio(QWEN25_7B)
    # quantizable weights: 28 * (25,690,112 + 3,670,016 + 203,685,888) = 6,525,288,448
    quantizable = 28 * (2 * 3584 * 3584 + 2 * 512 * 3584 + 3 * 18944 * 3584)
    assert quantizable == 6_525_288_448
    # rest: biases 28*(3584+2*512) + norms 28*2*3584 + final 3584 + embeddings/head 2*152064*3584
    #     = 129,024 + 200,704 + 3,584 + 1,089,994,752 = 1,090,328,064
    rest = 28 * (3584 + 2 * 512) + 28 * 2 * 3584 + 3584 + 2 * 152064 * 3584
    assert rest == 1_090_328_064
    assert quantizable + rest == e.params_total == 7_615_616_512
    # 6,525,288,448 * 2 / 3.2 + 1,090,328,064 * 2 = 4,078,305,280 + 2,180,656,128
    assert e.weights == 6_258_961_408


def test_tied_gemma_has_no_head():
    cfg = {"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
           "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256}
    e = _studio(cfg, method="lora")
    assert e.weights == 2 * 2_614_341_888
    # activations: q 8*256 = 2048, kv 4*256 = 1024; 8192 * (2048 + 2048 + 2 + 18432) * 2.5 = 8192 * 22530 * 2.5 = 461,414,400
    assert e.activations == 8192 * (2048 + 2 * 1024 + 2 + 2 * 9216) * 2.5 == 461_414_400


QWEN2_MOE_TINY = {"model_type": "qwen2_moe", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 48,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 4,
                  "moe_intermediate_size": 16, "shared_expert_intermediate_size": 64, "num_experts_per_tok": 2}


def test_moe_all_linear_skips_routed_experts():
    # per layer (H 32, head_dim 8): q 32+32, k 32+16, v 32+16, o 32+32 = 224;
    # shared expert gate 32+64, up 32+64, down 64+32 = 288; routed experts get nothing under all-linear
    e = _studio(QWEN2_MOE_TINY, lora_rank=2, target_modules="all-linear")
    assert e.params_trainable == 2 * (224 + 288) * 2 == 2048


def test_moe_explicit_names_adapt_every_routed_expert():
    # explicit gate/up/down add 4 experts x (32+16) for gate and up, 4 x (16+32) for down = 576 per layer
    e = _studio(QWEN2_MOE_TINY, lora_rank=2, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                        "gate_proj", "up_proj", "down_proj"])
    assert e.params_trainable == 2 * (224 + 288 + 576) * 2 == 4352
    # the default targets are those seven names, named explicitly
    assert _studio(QWEN2_MOE_TINY, lora_rank=2).params_trainable == 4352


def test_moe_weights_and_activations():
    e = _studio(QWEN2_MOE_TINY, method="lora", batch_size=1, seq_len=8)
    # MoE layer width: routed 16 x top-2 + shared 64 = 96; attention q 32, kv 16
    # per layer: (8*(32 + 2*16) + 8*2 + 8*2*96) * 2 * 1.25 = (512 + 16 + 1536) * 2.5 = 5160
    assert e.activations == 5160
    # quantizable: attention 2*32*32 + 2*16*32 = 3072; router 4*32 = 128; experts 4*3*16*32 = 6144;
    # shared 3*64*32 = 6144 and its gate 32 -> 15,520 per layer, 31,040 for two
    q = _studio(QWEN2_MOE_TINY)
    nonq = q.params_total - 31_040
    assert q.weights == round(31_040 * 2 / 3.2 + nonq * 2)


DEEPSEEK_TINY = {"model_type": "deepseek_v3", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
                 "moe_intermediate_size": 16, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
                 "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
                 "q_lora_rank": 16, "kv_lora_rank": 32, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8}


def test_mla_target_mapping():
    e = _studio(DEEPSEEK_TINY, lora_rank=1, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    # q_proj -> q_b_proj 16 + 4*(8+4) = 64; k_proj -> kv_a_proj_with_mqa 64 + (32+4) = 100;
    # v_proj -> kv_b_proj 32 + 4*(8+8) = 96; o_proj 4*8 + 64 = 96; 356 per layer, 4 layers
    assert e.params_trainable == 4 * 356 == 1424
    assert set(e.lora_targets) == {"q_proj", "k_proj", "v_proj", "o_proj"}


GEMMA4_TINY = {"model_type": "gemma4_text", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 32,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
               "global_head_dim": 16, "layer_types": ["sliding_attention", "full_attention"],
               "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 50, "enable_moe_block": True,
               "num_experts": 4, "moe_intermediate_size": 16, "top_k_experts": 2}


@pytest.mark.parametrize("gc,expected", [
    # layer 0 (sliding): q 4*8 = 32, kv 2*8 = 16, MLP 16 x top-2 + parallel dense 32 = 64, PLE 64 + 8 = 72
    #   10*(32 + 32) + 10*2 + 10*2*64 + 10*72 = 2660 -> * 2.5 = 6650
    # layer 1 (full): q 4*16 = 64, kv 2*16 = 32: 10*(64 + 64) + 20 + 1280 + 720 = 3300 -> 8250
    # global per-layer tensor: 10 tokens * 2 layers * 8 * 2.5 = 400
    ("unsloth", 8250 + 400),
    ("none", 6650 + 8250 + 400),
])
def test_gemma4_ple_and_parallel_moe_activations(gc, expected):
    e = _studio(GEMMA4_TINY, method="lora", batch_size=1, seq_len=10, gradient_checkpointing=gc)
    assert e.activations == expected


def test_per_layer_embedding_modules_need_explicit_names():
    base = _studio(GEMMA4_TINY, lora_rank=1, target_modules="all-linear").params_trainable
    named = _studio(GEMMA4_TINY, lora_rank=1, target_modules=[
        "all-linear", "per_layer_input_gate", "per_layer_projection", "per_layer_model_projection"]).params_trainable
    # gate 64 + 8 and projection 8 + 64 per layer, the global projection 64 + 16
    assert named - base == 2 * (72 + 72) + (64 + 16)


K_EQ_V_TINY = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "global_head_dim": 16,
               "num_global_key_value_heads": 1, "attention_k_eq_v": True, "hidden_size_per_layer_input": 0,
               "layer_types": ["sliding_attention", "full_attention"]}


@pytest.mark.parametrize("model_type", ["gemma4_text", None])
@pytest.mark.parametrize("gc,expected", [
    # 10 tokens. Layer 0 (sliding): q 4*8 = 32, keys and values 2*8 = 16 each, MLP 32:
    #   10*(32 + 2*16) + 10*2 + 10*2*32 = 640 + 20 + 640 = 1300 -> * 2.5 = 3250
    # layer 1 (full, K = V): q 4*16 = 64, one key/value tensor of num_global_key_value_heads 1 x 16 = 16:
    #   10*(64 + 1*16) + 20 + 640 = 1460 -> 3650 (charging the values again would give 10*16*2.5 = 400 more)
    ("none", 3250 + 3650),
    ("unsloth", 3650),
])
def test_keys_used_as_values_are_charged_once(model_type, gc, expected):
    # the reference estimator's kv_count: q + kv x 1 on a layer that is not sliding when attention_k_eq_v,
    # for a typed Gemma 4 config and one without a model type alike
    cfg = dict(K_EQ_V_TINY, **({"model_type": model_type} if model_type else {}))
    e = _studio(cfg, method="lora", batch_size=1, seq_len=10, gradient_checkpointing=gc)
    assert e.activations == expected


UNEVEN_HEADS = {"vocab_size": 100, "hidden_size": 60, "intermediate_size": 32, "num_hidden_layers": 2,
                "num_attention_heads": 8, "num_key_value_heads": 2}


@pytest.mark.parametrize("extra,expected", [
    # no model type and no per-layer-shape field: the uniform layer, whose query width the activations take
    # as H = 60 (8 heads of 60 // 8 = 7 make a q_proj only 56 wide); keys and values 2 x 7 = 14 each.
    # 10 tokens: 10*(60 + 2*14) + 10*2 + 10*2*32 = 880 + 20 + 640 = 1540 -> * 2.5 = 3850 a layer
    ({}, 2 * 3850),
    # head_dim given (or layer_types) takes the layer off the uniform shape: q 8 x 7 = 56,
    # 10*(56 + 28) + 20 + 640 = 1500 -> 3750 a layer
    ({"head_dim": 7}, 2 * 3750),
    ({"layer_types": ["full_attention", "full_attention"]}, 2 * 3750),
])
def test_uniform_layer_charges_the_hidden_size_as_query_width(extra, expected):
    e = _studio({**UNEVEN_HEADS, **extra}, method="lora", batch_size=1, seq_len=10, gradient_checkpointing="none")
    assert e.activations == expected
    # the weights keep the module's own width: q and o 60 x 56, k and v 60 x 14, MLP 3 x 60 x 32, two norms a
    # layer, the final norm, an embedding and an output head of 100 x 60 (untied when the config does not say)
    assert e.params_total == 2 * (2 * 60 * 56 + 2 * 60 * 14 + 3 * 60 * 32 + 2 * 60) + 60 + 2 * 100 * 60
