"""The hf profile's first-layer attention under LoRA, attention sinks, gpt-oss's routed experts, sdpa's
sliding-window masks and eager's masks per layer kind (formulas/hf/activations.yaml), each derived by hand
from the modelling code. The agreement with measured steps is tests/measured/test_validation_matrix.py
(phi3 LoRA, gpt_oss_layers, gemma3_text_recompute cells)."""

from __future__ import annotations

from helpers import traced
from vramwise import estimate

OPT = dict(optimizer="adamw_torch")
NO_GC = dict(gradient_checkpointing="none")


def per_layer(est, fid: str) -> list:
    """A layer-scope formula's values, one per layer class, in the classes' order."""
    return [t.value for t in est.trace if t.id == fid]


# phi3: 2 layers, hidden 256, 4 heads of 64 (q_dim 256), 4 KV heads (kv_dim 256), MLP 768, fused qkv_proj
PHI3 = {"model_type": "phi3", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": False,
        "pad_token_id": None, "bos_token_id": None, "eos_token_id": None}


def test_phi3_default_targets_feed_no_attention():
    """PEFT's default names (q/k/v/o/gate/up/down) match only o_proj and down_proj on Phi-3: no adapter feeds
    the attention (o_proj's input is the attention's output). Naming qkv_proj puts one feeding adapter on each
    of the 2 layers."""
    e = estimate(PHI3, profile="hf", method="lora", batch_size=1, seq_len=128, attention="sdpa", **OPT, **NO_GC)
    assert traced(e, "first_layer_attention_idle") is True
    fused = estimate(PHI3, profile="hf", method="lora", batch_size=1, seq_len=128, attention="sdpa",
                     target_modules="qkv_proj,o_proj,gate_up_proj,down_proj", **OPT, **NO_GC)
    assert traced(fused, "first_layer_attention_idle") is False
    # the attention saves, but the first layer's input norm still does not (its input needs no gradient):
    # 128 tokens x 256 x 4 bytes (its float32 upcast)
    assert traced(fused, "first_layer_unsaved_bytes") == 128 * 256 * 4


def test_adapters_on_the_mlp_only_leave_the_first_layer_residual_idle():
    """Adapters on gate_up_proj and down_proj only: nothing in the first layer's attention trains, so the
    residual stream after it needs no gradient and the norm before the MLP saves nothing either: beside the
    input norm and the attention (2048 + 16 + 1024 bytes a token, as below), its float32 input, 4 x 256 = 1024
    bytes a token; 128 x (2048 + 16 + 1024 + 1024)."""
    e = estimate(PHI3, profile="hf", method="lora", batch_size=1, seq_len=128, attention="sdpa",
                 target_modules="gate_up_proj,down_proj", **OPT, **NO_GC)
    assert traced(e, "first_layer_residual_idle") is True
    assert traced(e, "first_layer_unsaved_bytes") == 128 * (2048 + 16 + 1024 + 1024)
    with_o = estimate(PHI3, profile="hf", method="lora", batch_size=1, seq_len=128, attention="sdpa",
                      target_modules="o_proj,gate_up_proj,down_proj", **OPT, **NO_GC)
    # an adapter on the output projection makes the residual need a gradient: that norm saves again
    assert traced(with_o, "first_layer_residual_idle") is False
    assert traced(with_o, "first_layer_unsaved_bytes") == 128 * (2048 + 16 + 1024)


def test_phi3_first_layer_saves_no_attention_or_input_norm():
    """sdpa, batch 1 x 128 (128 tokens), bf16 stream: the attention saves q (256), k and v (2 x 256) and the
    output (256) in bf16, 2 x 1024 = 2048 bytes a token, and a float32 log-sum-exp per head, 4 x 4 = 16;
    the norm before the attention (norm_act_width 512 less the one before the MLP, 256) its float32 input,
    4 x 256 = 1024. The first layer saves none of it: 128 x (2048 + 16 + 1024) = 395,264 bytes fewer."""
    e = estimate(PHI3, profile="hf", method="lora", batch_size=1, seq_len=128, attention="sdpa", **OPT, **NO_GC)
    assert traced(e, "layer_attention_saved") == 2048 + 16
    assert traced(e, "first_layer_unsaved_bytes") == 128 * (2048 + 16 + 1024)
    assert traced(e, "saved_layers_bytes") == 2 * traced(e, "layer_saved_bytes") - 395_264


def test_first_layer_attention_is_kept_with_checkpointing_and_full():
    """Checkpointing makes the embedding's output require a gradient (enable_input_require_grads), and full
    fine-tuning trains the embedding: the first layer's attention saves as the others do."""
    for kw in (dict(method="lora", gradient_checkpointing="true"), dict(method="full", **NO_GC)):
        e = estimate(PHI3, profile="hf", batch_size=1, seq_len=128, attention="sdpa", **OPT, **kw)
        assert traced(e, "first_layer_unsaved_bytes") == 0


# gpt-oss: 2 layers (sliding, full), hidden 256, 4 heads of 64, 2 KV heads (kv_dim 128), 8 experts of 256, top-2
GPT_OSS = {"model_type": "gpt_oss", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 256,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
           "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 64,
           "layer_types": ["sliding_attention", "full_attention"], "tie_word_embeddings": False}


def test_sinks_keep_one_probability_per_key_and_the_sink():
    """Eager with sinks, seq 128, LoRA: q (256), keys and values (2 x 128) and the output (256) in bf16,
    2 x 768 = 1536 bytes a token, and the softmax's bf16 output over the 128 keys and the sink per head,
    4 x 129 x 2 = 1032; the probabilities without the sink are a view (no copy)."""
    e = estimate(GPT_OSS, profile="hf", method="lora", batch_size=1, seq_len=128, attention="eager", **OPT)
    assert per_layer(e, "layer_attention_saved") == [1536 + 1032] * 2


def test_gpt_oss_routed_copies():
    """Per token, two routed copies. LoRA (frozen, unadapted experts): mlp_width 2 x 256 = 512, three of it in
    bf16, 3 x 512 x 2 = 3072, plus per copy 3 x 256 + 256 = 1024 elements (the clamped SwiGLU's further
    tensors and the weighted output), 2 x 1024 x 2 = 4096, plus the router's 8 bytes per expert, 64: 7232.
    Full: also the input copy and the gated output per copy, 2 x (256 + 256) x 2 = 2048 more: 9280."""
    lora = estimate(GPT_OSS, profile="hf", method="lora", batch_size=1, seq_len=128, attention="eager", **OPT)
    full = estimate(GPT_OSS, profile="hf", method="full", batch_size=1, seq_len=128, attention="eager", **OPT)
    assert per_layer(lora, "layer_mlp_saved") == [3072 + 4096 + 64] * 2
    assert per_layer(full, "layer_mlp_saved") == [3072 + 4096 + 64 + 2048] * 2


# gemma3_text: 2 layers (sliding, full), hidden 256, 4 heads of 64, 1 KV head
GEMMA3 = {"model_type": "gemma3_text", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
          "sliding_window": 64, "layer_types": ["sliding_attention", "full_attention"]}


def test_sdpa_sliding_layer_keeps_its_mask_once_the_window_is_reached():
    """sdpa, seq 128 >= window 64: the sliding layer saves the additive bf16 mask, batch x 1 x 128 x 128,
    128 x 2 = 256 bytes a token more than the full layer; with a window of 4096 transformers passes no mask
    (is_causal), and at seq 64 = window it builds one."""
    e = estimate(GEMMA3, profile="hf", method="full", batch_size=1, seq_len=128, attention="sdpa", **OPT)
    sliding, full = per_layer(e, "layer_attention_saved")
    assert sliding - full == 128 * 2
    wide = estimate(dict(GEMMA3, sliding_window=4096), profile="hf", method="full", batch_size=1, seq_len=128,
                    attention="sdpa", **OPT)
    assert per_layer(wide, "layer_sdpa_window_mask") == [False, False]
    at = estimate(GEMMA3, profile="hf", method="full", batch_size=1, seq_len=64, attention="sdpa", **OPT)
    assert per_layer(at, "layer_sdpa_window_mask") == [True, False]
    eager = estimate(GEMMA3, profile="hf", method="full", batch_size=1, seq_len=128, attention="eager", **OPT)
    assert per_layer(eager, "layer_sdpa_window_mask") == [False, False]


def test_eager_masks_per_layer_kind_under_checkpointing():
    """Eager, batch 2 x 128: one mask is 2 x 128 x 128 x 2 = 65,536 bytes. With sliding and full layers and
    checkpointing, each layer keeps its kind's mask: two; without checkpointing one, as for a model with full
    layers only."""
    one = 2 * 128 * 128 * 2
    kw = dict(method="full", batch_size=2, seq_len=128, attention="eager", **OPT)
    assert traced(estimate(GEMMA3, profile="hf", gradient_checkpointing="true", **kw), "eager_mask_bytes") == 2 * one
    assert traced(estimate(GEMMA3, profile="hf", gradient_checkpointing="none", **kw), "eager_mask_bytes") == one
    full_only = dict(GEMMA3, layer_types=["full_attention"] * 2)
    assert traced(estimate(full_only, profile="hf", gradient_checkpointing="true", **kw), "eager_mask_bytes") == one


def test_norm_after_the_mlp_backward_holds_five_float32_widths():
    """Gemma 3's post-feedforward norm (256 wide): five float32 tensors of its width, 5 x 4 x 256 = 5120 bytes
    a token under LoRA; under full fine-tuning less its float32 normalised tensor, 4096."""
    lora = estimate(GEMMA3, profile="hf", method="lora", batch_size=1, seq_len=128, attention="sdpa",
                    gradient_checkpointing="true", **OPT)
    full = estimate(GEMMA3, profile="hf", method="full", batch_size=1, seq_len=128, attention="sdpa",
                    gradient_checkpointing="true", **OPT)
    assert per_layer(lora, "layer_norm_backward_transient") == [5120, 5120]
    assert per_layer(full, "layer_norm_backward_transient") == [4096, 4096]
