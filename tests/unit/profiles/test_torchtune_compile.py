"""torch.compile in the torchtune profile (formulas/torchtune/compile.yaml): what torchtune 0.6.1's
compile_model (each TransformerSelfAttentionLayer compiled on its own) and compile_loss change, derived by
hand from the tensors a compiled llama3 layer saves (listed with saved_tensors_hooks on its compiled
forward: the bf16 layer input, the attention input, q, the keys and values expanded to every head, the
attention output, a float32 log-sum-exp per head, the residual after attention, the MLP input, w1's and w3's
outputs and w2's input) and from the recipes (the full recipe drops the compiled standard loss). The
agreement with compiled steps measured from the allocator's reports is
tests/measured/test_validation_matrix_torchtune_compile.py."""

from __future__ import annotations

from helpers import traced
from vramwise import estimate

# llama: 2 layers, hidden 64, 4 heads of 16 (q_dim 64), 2 KV heads (kv_dim 32), MLP 160, vocabulary 1000, untied
LLAMA = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 160,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
         "max_position_embeddings": 256}
B, S = 2, 16
T = B * S  # 32 tokens
H, Q, M, HEADS, V = 64, 64, 160, 4, 1000
SEVEN = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

value = traced  # both layers are one layer class here: a layer-scope formula is traced once


def tt(compile_, **kw):
    kw.setdefault("method", "full")
    kw.setdefault("optimizer", "adamw_torch")
    kw.setdefault("gradient_checkpointing", "none")
    return estimate(LLAMA, profile="torchtune", batch_size=B, seq_len=S, compile=compile_, **kw)


def test_a_compiled_layer_keeps_bf16_norm_inputs_and_two_mlp_outputs():
    e, eager = tt(True), tt(False)
    assert value(e, "compiled") is True
    # norms: two per layer, each keeps its bf16 input, 2 x 64 x 2 bytes per token (eager: float32 input and
    # float32 normalised tensor, 2 x 64 x (4 + 4))
    assert value(e, "layer_norm_saved") == 2 * H * 2
    assert value(eager, "layer_norm_saved") == 2 * H * (4 + 4)
    # MLP: w1's and w3's outputs in bf16, 2 x 160 x 2 (eager adds the SiLU output: 3 x 160 x 2)
    assert value(e, "layer_mlp_saved") == 2 * M * 2
    assert value(eager, "layer_mlp_saved") == 3 * M * 2
    # the projections' inputs and the attention are eager's: (2 x 64 + 160) x 2 and q, k, v expanded, output
    # (4 x 64 x 2) plus a float32 log-sum-exp per head (4 x 4)
    assert value(e, "layer_linear_inputs_saved") == (2 * H + M) * 2
    assert value(e, "layer_attention_saved") == 4 * Q * 2 + HEADS * 4
    # per token and layer: 256 + 576 + 528 + 640 = 2,000 bytes; times 32 tokens and 2 layers
    assert value(e, "saved_layers_bytes") == T * 2 * (256 + 576 + 528 + 640)


def test_the_full_recipe_keeps_its_standard_loss_eager():
    e = tt(True)
    # recipes/full_finetune_single_device.py:293-294 drops what compile_loss returns
    assert value(e, "compiled_loss") is False
    assert value(e, "logits_saved_bytes") == T * V * 4  # float32 log-probabilities, as eager
    assert value(e, "logits_backward_bytes") == 2 * T * V * 4


def test_the_lora_recipe_compiles_its_standard_loss():
    e = tt(True, method="lora", lora_rank=8, target_modules=SEVEN)
    assert value(e, "compiled_loss") is True
    # saved: the float32 logits it was given, 32 x 1000 x 4 (in place of the float32 log-probabilities)
    assert value(e, "logits_saved_bytes") == T * V * 4
    # forward: the bf16 logits beside their float32 copy while unembed upcasts them, 32 x 1000 x 2
    assert value(e, "logits_forward_transient_bytes") == T * V * 2
    # backward start: one float32 gradient of the logits (eager: two, the nll and log-softmax gradients)
    assert value(e, "logits_backward_bytes") == T * V * 4
    # the first layer's attention norm saves no bf16 input (the embedding's output needs no gradient): 32 x 64 x 2
    assert value(e, "first_norm_unsaved_bytes") == T * H * 2


def test_the_compiled_chunked_loss_keeps_the_bf16_chunks():
    for method in ("full", "lora"):
        kw = dict(method=method, loss="chunked", loss_chunks=8)
        if method == "lora":
            kw.update(lora_rank=8, target_modules=SEVEN)
        e = tt(True, **kw)
        assert value(e, "compiled_loss") is True
        # saved: every chunk's bf16 logits, 32 x 1000 x 2 (eager: float32 log-probabilities, x 4)
        assert value(e, "logits_saved_bytes") == T * V * 2
        # backward start: the first chunk's bf16 gradient, 2 x ceil(16 / 8) = 4 rows x 1000 x 2 (each chunk's saved
        # logits go as its gradient comes)
        assert value(e, "logits_backward_bytes") == 4 * V * 2
        # forward: no chunk upcast; on a GPU nothing else (cuBLAS reads the frozen head's expanded weight in place)
        assert value(e, "logits_forward_transient_bytes") == 0
        assert value(e, "compiled_frozen_head_copy_bytes") == 0
        # a CPU whose bf16 products are oneDNN's copies a frozen head's (LoRA) weight expanded to the batch:
        # 2 x 1000 x 64 x 2; torch's own CPU kernel does not
        onednn = tt(True, step_device="cpu_onednn", **kw)
        assert value(onednn, "logits_forward_transient_bytes") == (B * V * H * 2 if method == "lora" else 0)
        assert value(onednn, "compiled_frozen_head_copy_bytes") == (B * V * H * 2 if method == "lora" else 0)
        assert value(tt(True, step_device="cpu", **kw), "compiled_frozen_head_copy_bytes") == 0
        # a trained head's first out-of-place sum comes after two chunks' head backward: 2 chunks of 4 rows,
        # 4 x 1000 x 2 bytes each, are gone (eager: none; a frozen head makes no sum)
        assert value(e, "compiled_head_grads_consumed") == (2 * 4 * V * 2 if method == "full" else 0)
    assert value(tt(False, method="full", loss="chunked", loss_chunks=8), "compiled_head_grads_consumed") == 0


def test_checkpointing_recomputes_a_compiled_layer_and_its_forward_returns_it_whole():
    e = tt(True, gradient_checkpointing="true")
    assert value(e, "compiled") is True
    # one compiled layer's saved tensors, 32 tokens x 2,000 bytes (test above), recomputed in the backward and
    # held at the end of each compiled layer forward
    assert value(e, "recompute_bytes") == T * 2000
    assert value(e, "compiled_checkpoint_forward_bytes") == T * 2000
    assert not [w for w in e.warnings if "compile" in w]
    # with offloading the layers' inputs leave the device as eager (one brought back at a time): the compiled
    # layer's 32 x 2,000 bytes are still recomputed and returned whole by each compiled forward
    off = tt(True, gradient_checkpointing="true", activation_offloading=True)
    assert value(off, "compiled") is True
    assert value(off, "compiled_checkpoint_forward_bytes") == T * 2000


def test_what_is_not_modelled_is_estimated_eager_with_a_warning():
    lora = dict(method="lora", lora_rank=8, target_modules=SEVEN)
    # (settings, the warning's words, whether the loss is still modelled compiled)
    cases = [
        (dict(lora, gradient_checkpointing="true"), "activation checkpointing are not modelled", True),
        (dict(lora, gradient_checkpointing="true", activation_offloading=True), "activation checkpointing are not modelled", True),
        (dict(lora, lora_dropout=0.05), "estimated as their eager run", True),
        # QLoRA's loss is LoRA's (one recipe, one bf16 head): compiled; its layers eager
        (dict(method="qlora", lora_rank=8, target_modules=SEVEN), "estimated as their eager run", True),
        (dict(method="full", loss="linear_chunked"), "estimated as their eager run", False),
    ]
    for kw, said, loss_compiled in cases:
        e, eager = tt(True, **kw), tt(False, **kw)
        assert value(e, "compiled") is False, kw
        assert [w for w in e.warnings if w.startswith("compile:") and said in w], (kw, e.warnings)
        # the layers are eager's
        assert value(e, "saved_layers_bytes") == value(eager, "saved_layers_bytes"), kw
        assert value(e, "recompute_bytes") == value(eager, "recompute_bytes"), kw
        assert value(e, "compiled_loss") is loss_compiled, kw
        if loss_compiled:  # LoRA's standard loss compiled: one float32 gradient at the backward's start, 32 x 1000 x 4
            assert value(e, "logits_backward_bytes") == T * V * 4, kw
        else:
            assert e.figures["tensor_peak"] == eager.figures["tensor_peak"], kw


def test_compile_off_leaves_the_estimate_as_it_was():
    # compile defaults to false: the flag is off and no compile warning is given
    e = estimate(LLAMA, profile="torchtune", method="full", batch_size=B, seq_len=S, optimizer="adamw_torch")
    assert value(e, "compiled") is False
    assert not [w for w in e.warnings if "compile" in w]
