"""torch.compile in the hf profile (formulas/hf/compile.yaml), derived by hand from what inductor's min-cut
partitioner saves for a Llama layer (checked by listing the compiled step's saved tensors with
saved_tensors_hooks) and what AOTAutograd materialises at the start of the backward. The agreement with
compiled steps measured from the allocator's reports is tests/measured/test_validation_matrix_compile.py."""

from __future__ import annotations

import pytest

from helpers import traced
from vramwise import estimate

# llama: 2 layers, hidden 64, 4 heads of 16 (q_dim 64), 2 KV heads (kv_dim 32), MLP 160, vocabulary 1000, untied
LLAMA = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 160,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False}
B, S = 2, 16
T = B * S  # 32 tokens
H, Q, O, M, HEADS, V = 64, 64, 64, 160, 4, 1000


def hf(compile_, **kw):
    kw.setdefault("method", "full")
    kw.setdefault("attention", "sdpa")
    kw.setdefault("optimizer", "adamw_torch")
    kw.setdefault("gradient_checkpointing", "none")
    return estimate(LLAMA, profile="hf", batch_size=B, seq_len=S, compile=compile_, **kw)


value = traced  # both layers are one layer class here: a layer-scope formula is traced once


def test_a_compiled_full_layer_saves_what_the_partitioner_keeps():
    e = hf(True)
    assert value(e, "compiled") is True
    # norms: two per layer (input, post-attention), each keeps its bf16 input: 2 x 64 x 2 bytes per token
    assert value(e, "layer_norm_saved") == 2 * H * 2
    # MLP: gate and up outputs in bf16 (the SiLU is recomputed): 2 x 160 x 2
    assert value(e, "layer_mlp_saved") == 2 * M * 2
    # attention: q (64), k and v repeated to 4 heads (64 + 64), output (64) in bf16, and a log-sum-exp per head
    # (a float32 log-sum-exp: 4 bytes per head and token)
    assert value(e, "layer_attention_saved") == 2 * (2 * Q + 2 * O) + HEADS * 4
    # the linear inputs are eager's: attention input, MLP input, down projection's input, in bf16
    assert value(e, "layer_linear_inputs_saved") == 2 * (2 * H + M)
    # head: the final norm's bf16 input and the head's bf16 input, and the causal mask B x S x S in bf16
    assert value(e, "head_saved_bytes") == T * H * (2 + 2) + B * S * S * 2


def test_compiled_logits_are_bf16_with_two_gradients_at_the_backward_start():
    e, eager = hf(True), hf(False)
    # saved: the bf16 logits, 32 x 1000 x 2 (eager: float32 log-probabilities, x 4)
    assert value(e, "logits_saved_bytes") == T * V * 2
    assert value(eager, "logits_saved_bytes") == T * V * 4
    # no float32 copy in the forward: the loss is one fused reduction
    assert value(e, "logits_forward_transient_bytes") == 0
    # backward start: the zero gradient of the logits output and the logits' gradient, both bf16
    assert value(e, "logits_backward_bytes") == 2 * T * V * 2


def test_lora_counts_one_float32_copy_per_distinct_input_but_is_estimated_eager():
    seven = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    e = hf(True, method="lora", lora_rank=8, target_modules=seven)
    a = value(e, "layer_lora_a_outputs_saved")
    # the 7 lora_A outputs, rank 8, float32
    assert a == 4 * 8 * 7
    # distinct inputs: attention input 64 + o_proj's input 64 + MLP input 64 + down's input 160, float32
    assert value(e, "compiled_lora_inputs_saved") == 4 * (H + O + H + M) + a
    # and that is what the compiled layer keeps for its adapters (eager PEFT keeps a copy per adapter:
    # 64 x 3 (q, k, v) + 64 + 64 x 2 (gate, up) + 160)
    assert value(e, "compiled") is True
    assert value(e, "layer_linear_inputs_saved") == value(e, "compiled_lora_inputs_saved")
    assert value(hf(False, method="lora", lora_rank=8, target_modules=seven),
                 "layer_linear_inputs_saved") == 4 * (3 * H + O + 2 * H + M) + a


def test_compiled_lora_backward_rises_in_the_last_layer():
    seven = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    e = hf(True, method="lora", lora_rank=8, target_modules=seven)
    # MLP backward (adapters on gate and up): the gate's and up's output gradients in bf16 and float32, and the
    # down projection's input gradient in bf16, 3 x 160 x 2 + 2 x 160 x 4 (its float32 one takes the place of
    # its freed float32 input copy)
    assert value(e, "compiled_layer_lora_mlp_backward") == 3 * M * 2 + 2 * M * 4
    # attention backward: the MLP's held buffers above its freed saved tensors, 160 x (2 + 2 x 4), and the gate's
    # and up's float32 input gradients less their shared float32 input, 64 x 4; the kernel's four query-wide
    # gradients, 4 x 64 x 2; two hidden-wide bf16 gradients with an adapter on o_proj, 2 x 64 x 2
    attention = M * (2 + 2 * 4) + H * 4 + 4 * Q * 2 + 2 * H * 2
    assert value(e, "compiled_layer_lora_attention_backward") == attention
    # the larger, for the 32 tokens, above every saved tensor in the layers' backward (the head is frozen)
    assert attention > 3 * M * 2 + 2 * M * 4
    assert value(e, "compiled_lora_backward_bytes") == T * attention
    assert value(e, "backward_layers_bytes") == (value(e, "resident_bytes") + value(e, "activation_saved_bytes")
                                                 + T * attention)


def test_compiled_lora_on_q_and_v_holds_no_float32_mlp_buffers():
    e = hf(True, method="lora", lora_rank=8, target_modules=["q_proj", "v_proj"])
    # no adapter on the MLP: its backward holds two bf16 MLP-wide gradients; at the attention, those take the
    # place of the gate's and up's freed outputs, so only the kernel's four query-wide gradients and one bf16
    # hidden-wide gradient (no adapter on o_proj) remain
    assert value(e, "compiled_layer_lora_mlp_backward") == 2 * M * 2
    assert value(e, "compiled_layer_lora_attention_backward") == 4 * Q * 2 + H * 2
    # the first layer's input norm keeps nothing (its input needs no gradient): 32 tokens x 64 x 2 (bf16, compiled)
    assert value(e, "first_layer_unsaved_bytes") == T * H * 2


@pytest.mark.parametrize("kw, reason", [
    ({"gradient_checkpointing": "true"}, "checkpointing"),
    ({"attention": "eager"}, "eager attention"),
    ({"method": "qlora"}, "4-bit"),
    ({"method": "lora", "lora_dropout": 0.1}, "dropout"),
    ({"loss": "chunked"}, "loss"),
])
def test_what_compile_does_not_model_is_the_eager_run_with_a_warning(kw, reason):
    compiled, eager = hf(True, **kw), hf(False, **kw)
    assert value(compiled, "compiled") is False
    assert compiled.figures == eager.figures
    assert any(w.startswith("compile: torch.compile") for w in compiled.warnings), reason


def test_compile_off_changes_nothing():
    e = hf(False)
    assert value(e, "compiled") is False
    assert not any(w.startswith("compile:") for w in e.warnings)


def test_a_single_key_value_head_is_repeated_as_a_view():
    # 4 query heads of 16 over one key/value head: repeat_kv's reshape of the expanded heads is a view, so the
    # attention keeps q (64), the one key and value (16 + 16) and the output (64) in bf16, and 4 log-sum-exps
    one_kv = estimate(dict(LLAMA, num_key_value_heads=1), profile="hf", method="full", batch_size=B, seq_len=S,
                      compile=True, attention="sdpa", optimizer="adamw_torch", gradient_checkpointing="none")
    assert value(one_kv, "layer_attention_saved") == 2 * (Q + 16 + 16 + O) + HEADS * 4
