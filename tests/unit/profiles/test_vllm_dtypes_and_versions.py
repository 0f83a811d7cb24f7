"""The vllm profile's KV-cache element size for every kv_cache_dtype and the hybrid-group threshold of each
vLLM release, derived by hand.

Element sizes: vLLM's ``STR_DTYPE_TO_TORCH_DTYPE`` (vllm/utils/torch_utils.py, 0.14.1 lines 33-45) maps
"bfloat16" and "half"/"float16" to 2-byte dtypes and "fp8", "fp8_e4m3" and "fp8_e5m2" to torch.uint8 (one
byte); "auto" is the model's dtype (bfloat16 for the bundled Llama 3.1 8B: 2 bytes).

Hybrid groups (vllm/v1/core/kv_cache_utils.py, _get_kv_cache_groups_uniform_page_size: 0.14.1 line 1036,
0.20.2 line 1139; docs/serving.md): full and sliding-window layers are cut into groups of the smaller kind's
count, or of the larger kind's count when that is less than the threshold times the smaller: 1 (never)
before 0.12, 1.25 from 0.12, 1.5 from 0.19.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import vramwise
from vramwise.profiles.settings import KV_CACHE_DTYPES

LLAMA = str(Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")
GIB = 2**30

#: bytes per cached element (see the module's docstring)
ELEMENT_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def _values(e) -> dict:
    return {t.id: t.value for t in e.trace}


def test_every_kv_cache_dtype_has_an_expected_size():
    assert set(ELEMENT_BYTES) == set(KV_CACHE_DTYPES)


@pytest.mark.parametrize("dtype", sorted(ELEMENT_BYTES))
def test_kv_cache_dtype_element_bytes(dtype):
    e = vramwise.estimate(LLAMA, profile="vllm", method="inference", gpu_memory=80 * GIB, vllm_version="0.19.0",
                          kv_cache_dtype=dtype)
    v = _values(e)
    size = ELEMENT_BYTES[dtype]
    assert v["kv_element_bytes"] == size
    # one block of one layer: 16 tokens (block_size before 0.34) x 8 KV heads x (128 + 128) x size bytes
    assert v["page_bytes"] == 16 * 8 * 256 * size
    # the blocks: the available KV memory over 32 layers' pages, rounded down
    assert e.figures["num_gpu_blocks"] == e.figures["available_kv"] // (32 * 16 * 8 * 256 * size)


def _hybrid(full: int, sliding: int) -> dict:
    """A small Qwen2 whose first ``full`` layers attend fully and the next ``sliding`` through a window."""
    return {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": full + sliding, "num_attention_heads": 4, "num_key_value_heads": 2,
            "use_sliding_window": True, "sliding_window": 64, "max_window_layers": full,
            "max_position_embeddings": 4096,
            "layer_types": ["full_attention"] * full + ["sliding_attention"] * sliding}


@pytest.mark.parametrize("full, sliding, version, group", [
    # 14 sliding, 10 full (1.4 times): 14 < 10 x 1.5 = 15 from 0.19 -> groups of 14; not < 12.5 (0.12-0.18) or
    # < 10 (before 0.12) -> groups of 10
    (10, 14, "0.11.0", 10), (10, 14, "0.12.0", 10), (10, 14, "0.18.1", 10), (10, 14, "0.19.0", 14),
    (10, 14, "0.20.2", 14),
    # 12 sliding (1.2 times): 12 < 12.5 from 0.12 -> 12; before 0.12, 12 < 10 fails -> 10
    (10, 12, "0.11.0", 10), (10, 12, "0.12.0", 12), (10, 12, "0.19.0", 12),
    # exactly 1.5 times: 15 < 15 fails -> the smaller count, 10
    (10, 15, "0.19.0", 10),
    # exactly 1.25 times: 15 sliding over 12 full, 15 < 15 fails at 0.12 -> 12; 15 < 18 from 0.19 -> 15
    (12, 15, "0.12.0", 12), (12, 15, "0.19.0", 15),
])
def test_hybrid_group_threshold_by_release(full, sliding, version, group):
    e = vramwise.estimate(_hybrid(full, sliding), profile="vllm", method="inference", gpu_memory=20 * GIB,
                          vllm_version=version, max_model_len=4096)
    v = _values(e)
    assert (v["full_layers"], v["sliding_layers"]) == (full, sliding)
    assert v["group_size"] == group
    # each kind in groups of group_size layers, the last one padded: ceil(count / group)
    assert (v["full_groups"], v["sliding_groups"]) == (-(-full // group), -(-sliding // group))
