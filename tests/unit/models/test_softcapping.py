"""Soft-capping in the hf profile, derived by hand from transformers' Gemma 2 code.

Gemma2ForCausalLM.forward caps the logits as ``logits / cap; torch.tanh; logits * cap``: tanh saves
its output for its backward (grad * (1 - tanh^2)), one tensor of tokens x vocabulary in the head's
dtype, alive from the forward until the backward reaches the head; the division and the
multiplication by a constant save nothing. eager_attention_forward does the same on the
[batch, heads, query, key] scores in the queries' dtype, one tensor per layer. The agreement with
measured steps is tests/measured/test_validation_matrix.py (gemma2 cells and growth checks).
"""

from __future__ import annotations

import pytest

from vramwise import estimate

# Gemma 2 layout: 2 layers, 64 wide, 2 heads of 32, 1 KV head, MLP 128, tied vocabulary 1000
G2 = {"model_type": "gemma2", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
      "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
NO_CAPS = dict(G2, attn_logit_softcapping=None, final_logit_softcapping=None)
B, S = 2, 16
T = B * S  # 32 tokens


def hf(cfg, **kw):
    kw.setdefault("method", "lora")
    kw.setdefault("attention", "eager")
    kw.setdefault("optimizer", "adamw_torch")
    kw.setdefault("gradient_checkpointing", "none")
    return estimate(cfg, profile="hf", batch_size=B, seq_len=S, **kw)


def value(est, fid):
    """A model-scope formula's value, or a layer-scope one's per-layer values (both layers alike here)."""
    got = [t.value for t in est.trace if t.id == fid]
    return got[0] if len(got) == 1 else got


def test_final_cap_keeps_tanh_output_in_the_head_dtype():
    # LoRA: the tied head computes in bf16, so tanh's output is 32 tokens x 1000 x 2 bytes = 64,000
    assert value(hf(G2), "logits_softcap_saved_bytes") == T * 1000 * 2
    # beside the float32 log-probabilities log_softmax saves: 32 x 1000 x 4 = 128,000
    assert value(hf(G2), "logits_saved_bytes") == T * 1000 * 4 + T * 1000 * 2
    # QLoRA: prepare_model_for_kbit_training upcasts the head, so the logits and tanh's output are float32
    assert value(hf(G2, method="qlora"), "logits_softcap_saved_bytes") == T * 1000 * 4
    # full fine-tuning: the head trains in bf16, the same 2 bytes as LoRA
    assert value(hf(G2, method="full"), "logits_softcap_saved_bytes") == T * 1000 * 2


@pytest.mark.parametrize("method", ("lora", "full", "qlora"))
def test_final_cap_adds_to_the_forward_end_and_the_backward_start(method):
    # the saved tanh output is alive at both phases the loss dominates; nothing else changes
    head = 4 if method == "qlora" else 2
    capped = hf(dict(NO_CAPS, final_logit_softcapping=30.0), method=method)
    plain = hf(NO_CAPS, method=method)
    for fid in ("forward_peak_bytes", "backward_start_bytes"):
        assert value(capped, fid) - value(plain, fid) == T * 1000 * head
    assert value(capped, "backward_layers_bytes") == value(plain, "backward_layers_bytes")


def test_a_chunked_or_fused_loss_caps_one_chunk_at_a_time():
    # liger's fused linear cross-entropy caps each chunk of logits inside its loop: no whole-vocabulary tensor
    for loss in ("chunked", "fused"):
        assert value(hf(G2, loss=loss), "logits_softcap_saved_bytes") == 0


def test_attention_cap_keeps_tanh_scores_per_layer_under_eager():
    # per token and layer: 2 heads x 16 keys x 2 bytes (bf16 queries under LoRA) = 64 bytes more;
    # eager already keeps 2 x 16 x (4 float32 softmax + 2 bf16 copy) = 192
    capped, plain = hf(dict(NO_CAPS, attn_logit_softcapping=50.0)), hf(NO_CAPS)
    per_token = [a - b for a, b in zip(value(capped, "layer_attention_saved"), value(plain, "layer_attention_saved"))]
    assert per_token == [2 * 16 * 2] * 2
    # without checkpointing both layers keep it: 2 layers x 32 tokens x 64 bytes = 4,096
    assert value(capped, "activation_saved_bytes") - value(plain, "activation_saved_bytes") == 2 * T * 64
    # QLoRA: the residual stream, hence the queries and the scores, are float32: 2 x 16 x 4 per token and layer
    q_capped = hf(dict(NO_CAPS, attn_logit_softcapping=50.0), method="qlora")
    q_plain = hf(NO_CAPS, method="qlora")
    assert value(q_capped, "activation_saved_bytes") - value(q_plain, "activation_saved_bytes") == 2 * T * 2 * 16 * 4


def test_attention_cap_under_checkpointing_is_in_the_recomputed_layer():
    # checkpointing keeps only each layer's input; the one layer rebuilt in the backward holds the
    # capped scores again: 32 tokens x 64 bytes = 2,048 more
    capped = hf(dict(NO_CAPS, attn_logit_softcapping=50.0), gradient_checkpointing="true")
    plain = hf(NO_CAPS, gradient_checkpointing="true")
    assert value(capped, "activation_saved_bytes") == value(plain, "activation_saved_bytes")
    assert value(capped, "recompute_bytes") - value(plain, "recompute_bytes") == T * 64


@pytest.mark.parametrize("attention", ("flash_attention_2", "flash_attention_3", "flex_attention"))
def test_fused_kernels_cap_inside_the_kernel(attention):
    # flash-attention takes softcap as a kernel argument, flex_attention applies it in score_mod: no scores kept
    capped = hf(dict(NO_CAPS, attn_logit_softcapping=50.0), attention=attention)
    plain = hf(NO_CAPS, attention=attention)
    assert capped.phases == plain.phases
    assert not capped.warnings


def test_sdpa_with_an_attention_cap_is_counted_as_eager_and_says_so():
    # transformers refuses the pair (Gemma2PreTrainedModel._supports_sdpa = False; sdpa_attention_forward
    # raises on softcap): eager is what it selects for Gemma 2 when no implementation is asked
    sdpa, eager = hf(G2, attention="sdpa"), hf(G2, attention="eager")
    assert sdpa.phases == eager.phases and sdpa.figures == eager.figures
    assert any("sdpa" in w and "soft-capping" in w for w in sdpa.warnings)
    assert not eager.warnings
    # without an attention cap sdpa keeps its memory-efficient figure (the final cap does not touch attention)
    final_only = dict(NO_CAPS, final_logit_softcapping=30.0)
    assert hf(final_only, attention="sdpa").phases["forward"] < hf(final_only, attention="eager").phases["forward"]
    # no soft-capping warning; the one left is that Gemma2ForCausalLM refuses sdpa whatever its caps
    # (_supports_sdpa = False), so a run needs another kernel
    (w,) = hf(final_only, attention="sdpa").warnings
    assert w.startswith("attention sdpa: transformers' model class for this config does not support it")


def test_gemma2_caps_default_to_the_config_class_and_null_or_zero_turns_them_off():
    # Gemma2Config: attn_logit_softcapping = 50.0, final_logit_softcapping = 30.0 when the fields are absent
    absent = {k: v for k, v in G2.items() if not k.endswith("softcapping")}
    assert hf(absent).figures == hf(G2).figures
    # explicitly null (transformers keeps None) or 0: no cap, both terms 0
    zero = dict(G2, attn_logit_softcapping=0, final_logit_softcapping=0.0)
    for cfg in (NO_CAPS, zero):
        e = hf(cfg)
        assert value(e, "logits_softcap_saved_bytes") == 0
        assert value(e, "attention_softcap") is False
    assert hf(zero).to_dict() == hf(NO_CAPS).to_dict()


@pytest.mark.parametrize("method", ("lora", "full", "qlora"))
@pytest.mark.parametrize("gc", ("none", "true"))
def test_removing_the_caps_gives_the_figure_without_the_two_terms(method, gc):
    # every phase of the capped model is the uncapped one plus exactly the two terms where they are alive
    capped, plain = hf(G2, method=method, gradient_checkpointing=gc), hf(NO_CAPS, method=method, gradient_checkpointing=gc)
    head = 4 if method == "qlora" else 2
    stream = 4 if method == "qlora" else 2
    scores = 2 * T * 2 * 16 * stream if gc == "none" else 0  # both layers' capped scores, saved when not checkpointing
    recompute = T * 2 * 16 * stream if gc == "true" else 0  # the recomputed layer's
    assert value(capped, "forward_peak_bytes") - value(plain, "forward_peak_bytes") == T * 1000 * head + scores
    assert value(capped, "backward_start_bytes") - value(plain, "backward_start_bytes") == T * 1000 * head + scores
    # inside the layers the saved activations give way to gradients: the larger of the two, plus the recomputed layer
    act, grads = value(plain, "activation_saved_bytes"), value(plain, "gradient_bytes")
    assert value(capped, "backward_layers_bytes") - value(plain, "backward_layers_bytes") == (
        recompute + max(act + scores, grads) - max(act, grads))
    assert value(capped, "optimizer_peak_bytes") == value(plain, "optimizer_peak_bytes")


def test_families_that_never_apply_a_cap_ignore_the_fields():
    # Gemma 3's attention never passes its cap to the attention function; Llama has no cap at all
    g3 = {"model_type": "gemma3_text", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32}
    assert hf(dict(g3, attn_logit_softcapping=50.0)).figures == hf(g3).figures
    # ... but Gemma3ForCausalLM caps its logits when final_logit_softcapping is set (default null)
    assert value(hf(dict(g3, final_logit_softcapping=30.0)), "logits_softcap_saved_bytes") == T * 1000 * 2
    assert value(hf(g3), "logits_softcap_saved_bytes") == 0
    llama = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 2}
    capped = dict(llama, attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
    assert hf(capped).figures == hf(llama).figures
