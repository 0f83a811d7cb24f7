"""The hf profile's loss_shift setting (formulas/hf/logits.yaml loss_shift_copy, loss_rows): transformers 4.46 to
4.48's ForCausalLMLoss upcasts the logits to float32 and copies the slice logits[..., :-1, :] contiguous before
the cross-entropy (loss/loss_utils.py lines 36-47 at 4.48.1); 4.49 on pads the labels and scores every row in
place. Expected figures are derived by hand below from those lines and torch's log_softmax / nll_loss lifetimes
(the log-probabilities saved, two float32 gradients at the start of the backward)."""

from __future__ import annotations

import pytest

from helpers import traced
from vramwise import estimate
from vramwise.errors import SettingsError

# llama: 2 layers, hidden 64, 4 heads, 2 KV heads, MLP 160, vocabulary 1000, untied
LLAMA = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 160,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
         "max_position_embeddings": 256}
B, S, V = 2, 16, 1000
T = B * S  # 32 tokens; shifted: 2 x 15 = 30 rows


def hf(**kw):
    kw.setdefault("method", "lora")
    kw.setdefault("optimizer", "adamw_torch")
    kw.setdefault("gradient_checkpointing", "true")
    return estimate(LLAMA, profile="hf", batch_size=B, seq_len=S, **kw)


def test_labels_is_the_default_and_scores_every_row():
    e = hf()
    assert e.settings.loss_shift == "labels"
    assert traced(e, "loss_shift_copy") is False
    assert traced(e, "loss_rows") == T
    # float32 log-probabilities of 32 rows: 32 x 1000 x 4
    assert traced(e, "logits_saved_bytes") == 128_000
    # the bf16 logits and their float32 upcast: 32 x 1000 x (2 + 4)
    assert traced(e, "logits_forward_transient_bytes") == 192_000
    # two float32 gradients of 32 rows: 2 x 32 x 1000 x 4
    assert traced(e, "logits_backward_bytes") == 256_000


def test_logits_adds_the_shifted_copy_and_scores_one_row_fewer_a_sequence():
    e = hf(loss_shift="logits")
    assert traced(e, "loss_shift_copy") is True
    assert traced(e, "loss_rows") == 30  # 2 sequences x 15
    # log-probabilities of the 30 shifted rows: 30 x 1000 x 4
    assert traced(e, "logits_saved_bytes") == 120_000
    # bf16 logits and float32 upcast of all 32 rows (192,000) + the contiguous shifted copy, 30 x 1000 x 4
    assert traced(e, "logits_forward_transient_bytes") == 192_000 + 120_000
    # two float32 gradients of the 30 rows: 2 x 30 x 1000 x 4
    assert traced(e, "logits_backward_bytes") == 240_000


def test_the_forward_peak_moves_by_the_copy_less_the_rows_not_scored():
    a, b = hf(), hf(loss_shift="logits")
    # forward: + 120,000 (copy) - 8,000 (two rows fewer of saved log-probabilities, 2 x 1000 x 4)
    assert b.phases["forward"] - a.phases["forward"] == 112_000
    # backward start (saved log-probabilities and two gradients): 3 x 2 x 1000 x 4 = 24,000 fewer
    assert traced(b, "backward_start_bytes") - traced(a, "backward_start_bytes") == -24_000


def test_a_head_upcast_to_float32_adds_only_the_copy():
    # QLoRA with prepare_model_for_kbit_training: the head's output is float32, .float() copies nothing
    a = hf(method="qlora", kbit_prepare=True)
    b = hf(method="qlora", kbit_prepare=True, loss_shift="logits")
    assert traced(a, "logits_forward_transient_bytes") == T * V * 4
    assert traced(b, "logits_forward_transient_bytes") == T * V * 4 + 30 * V * 4


def test_a_chunked_loss_has_no_shift_copy():
    e = hf(loss="chunked", loss_shift="logits")
    assert traced(e, "loss_shift_copy") is False
    assert traced(e, "loss_rows") == T


def test_an_unknown_value_is_refused_with_the_choices():
    with pytest.raises(SettingsError, match="labels, logits"):
        hf(loss_shift="copy")


def test_float_logits_drops_the_bf16_head_output_and_keeps_the_copy():
    # transformers 4.36 to 4.45 (Llama): logits = lm_head(h).float() in the forward, returned; the loss copies the
    # shifted slice. At log_softmax: the float32 logits 32 x 1000 x 4 = 128,000 and the copy 30 x 1000 x 4 =
    # 120,000 (the bf16 head output is gone once rebound)
    e = hf(loss_shift="float_logits")
    assert traced(e, "returned_logit_bytes") == 4
    assert traced(e, "loss_rows") == 30
    assert traced(e, "logits_forward_transient_bytes") == 128_000 + 120_000
    assert traced(e, "logits_saved_bytes") == 120_000


def test_a_loop_that_holds_the_output_keeps_its_logits_in_every_phase():
    a, b = hf(), hf(outputs_held=True)
    # transformers 4.49 on returns the head's bf16 logits: 32 x 1000 x 2 = 64,000 bytes, alive in every phase
    assert traced(b, "held_logits_bytes") == 64_000
    for phase in ("forward", "backward", "optimizer"):
        assert b.phases[phase] - a.phases[phase] == 64_000
    # the Trainer holds none
    assert traced(a, "held_logits_bytes") == 0


def test_a_held_output_of_float_logits_is_float32():
    e = hf(outputs_held=True, loss_shift="float_logits")
    assert traced(e, "held_logits_bytes") == T * V * 4  # 128,000


def test_a_chunked_loss_returns_no_logits_to_hold():
    e = hf(outputs_held=True, loss="chunked")
    assert traced(e, "held_logits_bytes") == 0


def test_a_held_output_reaches_each_rank_of_a_strategy():
    one = hf(outputs_held=True)
    ranks = hf(outputs_held=True, strategy="ddp", world_size=2)
    plain = hf(strategy="ddp", world_size=2)
    assert traced(ranks, "held_logits_bytes") == traced(one, "held_logits_bytes") == 64_000
    # each rank runs its own batch of 2 x 16 tokens: the same 64,000 bytes on top of every rank phase
    assert ranks.figures["tensor_peak"] - plain.figures["tensor_peak"] == 64_000
