"""The vllm profile's KV-cache arithmetic equals vLLM's own, case by case.

The expected values are what vLLM 0.34.0's functions return (get_global_kv_cache_groups, get_kv_cache_configs,
get_kv_cache_capacity, the start-up check and its "estimated maximum model length"), run on the CPU by
scripts/vllm_kv_reference.py and stored in tests/fixtures/vllm_kv_reference.json (its "command" says how).
Only the KV arithmetic is compared: vramwise is run on a GPU whose total memory is chosen so that its
available KV-cache memory equals the bytes vLLM was given. The models' configs are read from the shared
config corpus (without their quantization_config, which does not change the KV cache).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vramwise
from helpers import CONFIGS, SHARED_MISSING, shared_present

pytestmark = pytest.mark.skipif(not shared_present(), reason=SHARED_MISSING)
REFERENCE = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "vllm_kv_reference.json").read_text())
CASES = {case["name"]: case for case in REFERENCE["cases"]}
START_GPU = 85_031_714_816  # any total: the first estimate only measures what the budget takes before the cache


def _settings(case: dict) -> dict:
    return dict(vllm_version=REFERENCE["vllm_version"], max_model_len=case["max_model_len"],
                tensor_parallel_size=case["tensor_parallel_size"], block_size=case["block_size"],
                kv_cache_dtype=case["kv_cache_dtype"], max_num_batched_tokens=case["max_num_batched_tokens"])


def _at_available(case: dict):
    """The estimate on a GPU whose available KV-cache memory is the case's (from 0.34, with
    gpu_memory_utilization 1.0, the available memory grows byte for byte with the GPU's total)."""
    config = {k: v for k, v in json.loads((CONFIGS / case["config"]).read_text()).items() if k != "quantization_config"}
    gpu = START_GPU
    for _ in range(3):
        e = vramwise.estimate(config, profile="vllm", method="inference", gpu_memory=gpu, **_settings(case))
        gap = case["available_memory"] - e.figures["available_kv"]
        if gap == 0:
            return e
        gpu += gap
    raise AssertionError(f"{case['name']}: available_kv {e.figures['available_kv']} != {case['available_memory']}")


def test_the_reference_is_vllm_0_34_on_the_cases_of_the_issue():
    assert REFERENCE["vllm_version"] == "0.34.0"
    assert {"llama31_8b_tp1", "llama31_8b_tp4", "llama31_8b_tp16", "llama31_8b_fp8", "gpt_oss_20b",
            "gpt_oss_20b_refused", "gpt_oss_20b_tight", "gpt_oss_20b_short", "deepseek_v2_lite_mla",
            "deepseek_v2_lite_mla_fp8"} == set(CASES)
    # vLLM's own page sizes, checked by hand: 8 KV heads of 128 over TP 4 = 2 heads x (128 + 128) x 2 bytes x
    # 16 tokens = 16,384; TP 16 keeps one head per rank (8,192); MLA: 576 x 2 bytes x 64 tokens = 73,728.
    assert CASES["llama31_8b_tp4"]["groups"][0]["page_size_bytes"] == 2 * 256 * 2 * 16 == 16384
    assert CASES["llama31_8b_tp16"]["groups"][0]["page_size_bytes"] == 1 * 256 * 2 * 16 == 8192
    assert CASES["deepseek_v2_lite_mla"]["groups"][0]["page_size_bytes"] == 576 * 2 * 64 == 73728


@pytest.mark.parametrize("name", sorted(CASES))
def test_kv_figures_equal_vllms(name):
    case = CASES[name]
    f = _at_available(case).figures
    assert f["available_kv"] == case["available_memory"]
    # vLLM's bytes per block of the shared pool, and the blocks the available memory holds
    # (get_kv_cache_configs: available // bytes_per_block)
    assert f["num_gpu_blocks"] == case["available_memory"] // case["bytes_per_block"]
    assert f["kv_cache_bytes"] == f["num_gpu_blocks"] * case["bytes_per_block"]
    assert bool(f["starts"]) is case["starts"]
    # The start-up check compares vLLM's needed bytes with the available memory less the null block
    # (kv_cache_planning.py 0.34.0 lines 1638-1644); vramwise's needed_kv carries that block instead.
    assert f["needed_kv"] == case["needed_kv_bytes"] + case["bytes_per_block"]
    assert f["largest_max_model_len"] == case["largest_max_model_len"]
    if case["starts"]:
        assert f["num_gpu_blocks"] == case["num_gpu_blocks"]
        assert f["kv_cache_tokens"] == case["kv_cache_tokens"]
        assert f["max_concurrency"] == pytest.approx(case["max_concurrency"], rel=1e-12)
