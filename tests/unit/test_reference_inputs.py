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
