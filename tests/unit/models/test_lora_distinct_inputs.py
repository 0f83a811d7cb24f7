"""lora_distinct_inputs: the in features of the distinct tensors the adapted modules read (the modules a
family gives the same ``input`` share one), the sum a compiled step's float32 adapter copies follow."""

from __future__ import annotations

import pytest

from vramwise.estimation.registry import Registry

# llama-shaped: hidden 256, 4 query heads of 64 (q_dim 256), 2 key/value heads (kv_dim 128), MLP 688, 3 layers
LLAMA = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 688,
         "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2}


@pytest.fixture(scope="module")
def spec():
    return Registry().resolve(LLAMA)


@pytest.mark.parametrize("targets, per_layer", [
    # q, k, v read the attention's input (hidden 256): once
    (("q_proj", "k_proj", "v_proj"), 256),
    # q and v: the same input, once
    (("q_proj", "v_proj"), 256),
    # the seven: attention input 256 + o_proj's input (q_dim 256) + MLP input 256 + down_proj's input 688
    (("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), 256 + 256 + 256 + 688),
    # gate and up read the MLP's input: once
    (("gate_proj", "up_proj"), 256),
    # o_proj alone reads its own
    (("o_proj",), 256),
])
def test_distinct_inputs_by_hand(spec, targets, per_layer):
    sums = spec.peft_lora_sums(frozenset(targets))
    assert sums.distinct_inputs == 3 * per_layer
    # the per-adapter sum counts each adapter's input: never less
    assert sums.inputs >= sums.distinct_inputs


def test_the_per_adapter_sum_is_unchanged(spec):
    # q, k, v each count their own input: 3 x 256 per layer, x 3 layers
    sums = spec.peft_lora_sums(frozenset(("q_proj", "k_proj", "v_proj")))
    assert sums.inputs == 3 * 3 * 256


def test_no_adapters_no_inputs(spec):
    assert spec.peft_lora_sums(frozenset()).distinct_inputs == 0
    assert spec.lora_sums(frozenset()).distinct_inputs == 0


def test_the_unsloth_convention_shares_inputs_alike(spec):
    sums = spec.lora_sums(frozenset(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")))
    assert sums.distinct_inputs == 3 * (256 + 256 + 256 + 688)
