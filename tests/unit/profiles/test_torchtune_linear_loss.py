"""The torchtune profile's linear_chunked loss: LinearCrossEntropyLoss (pytorch/torchtune bd2a0fc7, main after
0.6.1, torchtune/modules/loss/cross_entropy_loss.py), which projects and scores the flattened tokens in
tensor_split chunks, so one chunk's logits exist at a time while every chunk's float32 log-probabilities are
kept for the backward. Each expected figure is worked out by hand from formulas/torchtune/logits.yaml."""

from __future__ import annotations

from vramwise import estimate

# 2 layers, 256 wide, 4 heads of 64, 2 KV heads, MLP 768, untied vocabulary 1000
TINY = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
        "max_position_embeddings": 4096}
V, H = 1000, 256
# batch 3 x seq 500 = 1500 tokens, which 8 chunks do not divide: tensor_split gives 1500 % 8 = 4 chunks of
# 188 rows, then 4 of 187
T = 3 * 500


def tt(**kw):
    kw.setdefault("optimizer", "adamw_torch")
    kw.setdefault("gradient_checkpointing", "none")
    return estimate(TINY, profile="torchtune", batch_size=3, seq_len=500, loss="linear_chunked", **kw)


def value(est, fid):
    return next(t.value for t in est.trace if t.id == fid and t.layer_indices is None)


def test_chunk_rows_split_the_flattened_tokens():
    e = tt(method="lora", loss_chunks=8)
    # the largest chunk ceil(1500 / 8) = 188 rows; the last (the backward's first) floor(1500 / 8) = 187
    assert value(e, "loss_chunk_rows") == 188
    assert value(e, "loss_last_chunk_rows") == 187


def test_forward_holds_one_chunk_of_logits_and_the_hidden_states():
    # one chunk's bf16 logits and their float32 copy: 188 x 1000 x (2 + 4) = 1,128,000; LoRA: the model's
    # bf16 output and mask_inputs' copy of it, 2 x 1500 x 256 x 2 = 1,536,000
    assert value(tt(method="lora", loss_chunks=8), "logits_forward_transient_bytes") == 1_128_000 + 1_536_000
    # full: the copy is the head's saved input (head_saved_bytes), so only the model's output, 768,000
    assert value(tt(method="full", loss_chunks=8), "logits_forward_transient_bytes") == 1_128_000 + 768_000
    # the log-probabilities of every chunk stay: 1500 x 1000 x 4
    assert value(tt(method="lora", loss_chunks=8), "logits_saved_bytes") == 6_000_000


def test_backward_of_the_second_chunk_when_the_head_trains():
    # full, 8 chunks; head gradient 1000 x 256 x 2 = 512,000; log-probabilities 6,000,000
    e = tt(method="full", loss_chunks=8)
    # second chunk's loss backward: 6,000,000 - 187 x 4000 + 2 x 188 x 4000 + 188 x 512 + 512,000
    #   = 6,000,000 - 748,000 + 1,504,000 + 96,256 + 512,000 = 7,364,256
    # its projection's backward: 6,000,000 - 2 x 748,000 + 2 x 96,256 + 2 x 512,000 + max(512,000, 188 x 2000)
    #   = 6,232,512
    assert value(e, "linear_loss_backward_bytes") == 7_364_256
    # the start of the backward holds 6,000,000 + 2 x 188 x 4000 = 7,504,000: 139,744 above the head's
    assert value(e, "backward_start_bytes") - value(e, "backward_head_bytes") == 7_504_000 - 7_364_256


def test_many_small_chunks_peak_in_the_projection_backward():
    # 64 chunks of 1500 tokens: 1500 % 64 = 28 chunks of 24 rows, the last 23
    e = tt(method="full", loss_chunks=64)
    # loss backward: 6,000,000 - 23 x 4000 + 2 x 24 x 4000 + 24 x 512 + 512,000 = 6,624,288
    # projection backward: 6,000,000 - 2 x 92,000 + 2 x 12,288 + 2 x 512,000 + max(512,000, 24 x 2000)
    #   = 7,376,576 (the head's gradient summed out of place outweighs the chunk's bf16 logits' gradient)
    assert value(e, "linear_loss_backward_bytes") == 7_376_576
    # above the start of the backward, 6,000,000 + 2 x 24 x 4000 = 6,192,000
    assert value(e, "backward_head_bytes") - value(e, "backward_start_bytes") == 7_376_576 - 6_192_000


def test_one_chunk():
    # one chunk of 1500 rows: its log-probabilities freed, its bf16 logits' gradient 1500 x 1000 x 2,
    # its input gradient 1500 x 256 x 2 and the head's gradient: 3,000,000 + 768,000 + 512,000
    assert value(tt(method="full", loss_chunks=1), "linear_loss_backward_bytes") == 4_280_000


def test_lora_peaks_where_the_other_losses_do():
    # no head gradient: the backward's start (every log-probability and one chunk's two float32 gradients)
    # stays above every later chunk, 6,000,000 + 1,504,000 against 6,000,000 - 748,000 + 1,504,000 + 96,256
    e = tt(method="lora", loss_chunks=8)
    assert value(e, "linear_loss_backward_bytes") == 6_000_000 - 748_000 + 1_504_000 + 96_256
    assert value(e, "backward_start_bytes") - value(e, "backward_head_bytes") == 748_000 - 96_256


def test_the_hf_profile_says_it_takes_linear_chunked_as_its_fused_loss():
    """transformers has no LinearCrossEntropyLoss: the hf profile estimates linear_chunked exactly as its
    chunked/fused loss (every loss but standard is that one in formulas/hf/logits.yaml) and says so."""
    settings = dict(profile="hf", method="lora", batch_size=3, seq_len=500, optimizer="adamw_torch",
                    gradient_checkpointing="none")
    linear = estimate(TINY, loss="linear_chunked", **settings)
    fused = estimate(TINY, loss="fused", **settings)
    assert linear.total == fused.total and linear.activations == fused.activations
    assert any("torchtune's LinearCrossEntropyLoss" in w for w in linear.warnings)
    assert not any("LinearCrossEntropyLoss" in w for w in fused.warnings)
