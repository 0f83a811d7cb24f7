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
