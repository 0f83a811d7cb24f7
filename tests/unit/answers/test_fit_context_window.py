"""fit's largest sequence stops at the model's context window (the config's max_position_embeddings).

The figures come from the config itself (read here from the catalog, not through the engine) and from
``vramwise.estimate`` at the lengths in question; none is copied from fit's own output.
"""

from __future__ import annotations

import json

import pytest

import vramwise
from vramwise.answers.fit import DEFAULT_FRONTIER, fit
from vramwise.inputs.catalog import catalog_model

GIB = 2**30
LLAMA = "meta-llama/Llama-3.1-8B"
SETTINGS = {"batch_size": 1, "lora_rank": 32}


def _config() -> dict:
    return json.loads(json.dumps(catalog_model(LLAMA).config))


def _fits_one_gpu(model, gpu_bytes: int, **settings) -> bool:
    # on one GPU without a strategy the placement rule is: the total fits the GPU's usable bytes
    return vramwise.estimate(model, **{**SETTINGS, **settings}).total <= gpu_bytes


def test_llama_3_1_is_capped_at_its_window_with_the_memory_figure_beside():
    config = _config()
    window = config["max_position_embeddings"]  # 131,072 in Meta's config.json
    rope = config["rope_scaling"]  # {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192, ...}
    assert window == 131_072 and rope["rope_type"] == "llama3" and rope["factor"] == 8.0
    # memory alone goes past the window: the window itself fits on 80 GiB
    assert _fits_one_gpu(LLAMA, 80 * GIB, seq_len=window)

    f = fit(LLAMA, gpu="80GiB", headroom=0, **SETTINGS)
    assert f.context_window == window and f.max_seq_len == window
    # the memory figure is the largest length whose estimate fits, and one token more does not
    assert f.max_seq_len_memory > window
    assert _fits_one_gpu(LLAMA, 80 * GIB, seq_len=f.max_seq_len_memory)
    assert not _fits_one_gpu(LLAMA, 80 * GIB, seq_len=f.max_seq_len_memory + 1)
    # llama3 rope scaling: max_position_embeddings is the extended window already, not multiplied by 8
    (note,) = f.notes
    assert (f"capped at the model's context window of {window:,} tokens "
            "(max_position_embeddings; rope scaling llama3, factor 8)") in note
    assert f"{f.max_seq_len_memory:,}" in note
    # the frontier stops at the window: the default grid's lengths up to 131,072 = 128 x 2**10
    assert [s for s, _ in f.frontier] == [128 * 2**k for k in range(11)]
    data = f.to_dict()
    assert data["max_seq_len"] == window and data["max_seq_len_memory"] == f.max_seq_len_memory
    assert data["context_window"] == window and data["notes"] == [note]


def test_a_config_without_a_window_is_not_capped():
    config = _config()
    del config["max_position_embeddings"]  # nor n_positions, max_sequence_length or seq_length in it
    assert not {"n_positions", "max_sequence_length", "seq_length"} & set(config)
    f = fit(config, gpu="80GiB", headroom=0, **SETTINGS)
    assert f.context_window is None and f.notes == ()
    # past the 131,072 tokens the full config would stop at: what memory allows, exactly
    assert f.max_seq_len == f.max_seq_len_memory > 131_072
    assert _fits_one_gpu(config, 80 * GIB, seq_len=f.max_seq_len)
    assert not _fits_one_gpu(config, 80 * GIB, seq_len=f.max_seq_len + 1)
    assert tuple(s for s, _ in f.frontier) == DEFAULT_FRONTIER


def test_a_window_memory_does_not_reach_changes_nothing():
    config = _config()
    config["max_position_embeddings"] = 8192
    # a GPU that holds 4,096 tokens and not 8,192: memory stops short of the window
    gpu = vramwise.estimate(config, **SETTINGS, seq_len=4096).total
    assert not _fits_one_gpu(config, gpu, seq_len=8192)
    f = fit(config, gpu=gpu, headroom=0, **SETTINGS)
    assert f.context_window == 8192 and f.notes == ()
    assert 4096 <= f.max_seq_len == f.max_seq_len_memory < 8192
    assert tuple(s for s, _ in f.frontier) == DEFAULT_FRONTIER  # the grid as asked, lengths past 8,192 "none fits"


@pytest.mark.parametrize("rope, words", [
    (None, "(max_position_embeddings)"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
     "(max_position_embeddings; rope scaling yarn, factor 4)"),
])
def test_a_small_window_memory_passes(rope, words):
    config = _config()
    config["max_position_embeddings"] = 4096
    config.pop("rope_scaling")
    if rope is not None:
        config["rope_scaling"] = rope
    assert _fits_one_gpu(config, 80 * GIB, seq_len=4096)
    f = fit(config, gpu="80GiB", headroom=0, seq_lens=[1024, 8192, 16384], **SETTINGS)
    assert f.max_seq_len == 4096 < f.max_seq_len_memory
    assert f"context window of 4,096 tokens {words}" in f.notes[0] and "frontier stops there" in f.notes[0]
    # 8,192 and 16,384 both become the window, once
    assert [s for s, _ in f.frontier] == [1024, 4096]
