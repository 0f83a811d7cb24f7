"""vLLM's own KV-cache arithmetic for a few models, as JSON: the reference for tests/unit/profiles/test_vllm_kv_reference.py.

What: for each case (a real model config, tensor_parallel_size, block_size, kv_cache_dtype, max_model_len,
max_num_batched_tokens and the bytes available for the KV cache), the figures vLLM itself computes when the
engine core sizes its cache: the number of GPU blocks, the "GPU KV cache size: N tokens" and "Maximum
concurrency" of its start-up log, the KV cache one request of max_model_len needs (the start-up check), and
the "estimated maximum model length" it reports when the model's full context does not fit.

How: vLLM's pure-Python modules run on the CPU. The config objects are vLLM's (ModelConfig read from the
model's config.json, ParallelConfig, CacheConfig, SchedulerConfig, VllmConfig); the per-layer specs are
built as the attention layers build them (vllm/model_executor/layers/attention/attention.py
Attention.get_kv_cache_spec, lines 637-712; mla_attention.py MLAAttention.get_kv_cache_spec, lines
1567-1599), with the heads per rank and the head size from ModelConfig.get_num_kv_heads / get_head_size.
Then the engine core's sequence (vllm/v1/engine/core.py lines 320-384): get_global_kv_cache_groups,
get_kv_cache_configs, generate_scheduler_kv_cache_config, get_kv_cache_capacity. The needed bytes come from
_max_memory_usage_bytes_from_groups (what the start-up check compares, kv_cache_planning.py lines
1297-1329) and the estimated length from the ValueError get_kv_cache_configs raises at the model's whole
context (kv_cache_planning.py lines 99-132).

vLLM version: 0.34.0, from its PyPI sdist (the source tree on PYTHONPATH; no compiled extension is used).
Run in a venv with torch 2.13.0 (CPU) and the pure-Python packages vLLM's imports need (pip install numpy
pydantic transformers==5.22.0 msgspec cbor2 xxhash cachetools psutil regex pyyaml cloudpickle pybase64 blake3
filelock pyzmq urllib3 aiohttp requests pillow uvloop py-cpuinfo prometheus_client llguidance xgrammar einops):

    PYTHONPATH=<vllm-0.34.0 sdist> python scripts/vllm_kv_reference.py CONFIG_DIR > tests/fixtures/vllm_kv_reference.json

CONFIG_DIR holds the models' config.json files as <org>__<name>.json (the shared config corpus); the
test reads them from there too. The
platform is set to CUDA's rules where they matter on a GPU: the hybrid KV-cache manager on
(current_platform.support_hybrid_kv_cache() is True on CUDA; vllm/config/vllm.py lines 2149-2215).
"""
from __future__ import annotations

import copy
import json
import re
import sys
import tempfile
from pathlib import Path

CASES = [
    # name, config file, settings, available bytes for the KV cache
    dict(name="llama31_8b_tp1", config="meta-llama__Llama-3.1-8B.json", tensor_parallel_size=1, block_size=16,
         kv_cache_dtype="auto", max_model_len=32768, max_num_batched_tokens=8192, available_memory=63711203637),
    dict(name="llama31_8b_tp4", config="meta-llama__Llama-3.1-8B.json", tensor_parallel_size=4, block_size=16,
         kv_cache_dtype="auto", max_model_len=131072, max_num_batched_tokens=8192, available_memory=70000000000),
    dict(name="llama31_8b_tp16", config="meta-llama__Llama-3.1-8B.json", tensor_parallel_size=16, block_size=16,
         kv_cache_dtype="auto", max_model_len=131072, max_num_batched_tokens=8192, available_memory=9000000000),
    dict(name="llama31_8b_fp8", config="meta-llama__Llama-3.1-8B.json", tensor_parallel_size=1, block_size=16,
         kv_cache_dtype="fp8", max_model_len=131072, max_num_batched_tokens=8192, available_memory=5000000000),
    dict(name="gpt_oss_20b", config="openai__gpt-oss-20b.json", tensor_parallel_size=1, block_size=16,
         kv_cache_dtype="auto", max_model_len=131072, max_num_batched_tokens=8192, available_memory=60000000000),
    dict(name="gpt_oss_20b_refused", config="openai__gpt-oss-20b.json", tensor_parallel_size=1, block_size=16,
         kv_cache_dtype="auto", max_model_len=131072, max_num_batched_tokens=8192, available_memory=1000000000),
    dict(name="gpt_oss_20b_tight", config="openai__gpt-oss-20b.json", tensor_parallel_size=1, block_size=16,
         kv_cache_dtype="auto", max_model_len=131072, max_num_batched_tokens=8192, available_memory=300000000),
    dict(name="gpt_oss_20b_short", config="openai__gpt-oss-20b.json", tensor_parallel_size=2, block_size=16,
         kv_cache_dtype="fp8", max_model_len=4096, max_num_batched_tokens=2048, available_memory=1500000000),
    dict(name="deepseek_v2_lite_mla", config="deepseek-ai__DeepSeek-V2-Lite.json", tensor_parallel_size=2,
         block_size=64, kv_cache_dtype="auto", max_model_len=32768, max_num_batched_tokens=8192,
         available_memory=40000000000),
    dict(name="deepseek_v2_lite_mla_fp8", config="deepseek-ai__DeepSeek-V2-Lite.json", tensor_parallel_size=1,
         block_size=64, kv_cache_dtype="fp8", max_model_len=163840, max_num_batched_tokens=8192,
         available_memory=2000000000),
]


def _model_dir(config_dir: Path, name: str, tmp: Path) -> str:
    """A folder holding the model's config.json (quantization_config dropped: it does not touch the KV cache,
    and vLLM's quantization checks need a real platform)."""
    raw = json.loads((config_dir / name).read_text())
    raw.pop("quantization_config", None)
    folder = tmp / name.removesuffix(".json")
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return str(folder)


def _specs(vc, hf_config) -> dict:
    """Per-layer specs, as Attention.get_kv_cache_spec / MLAAttention.get_kv_cache_spec build them."""
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec
    from vllm.model_executor.layers.attention.attention import get_kv_quant_mode

    mc, cc, pc = vc.model_config, vc.cache_config, vc.parallel_config
    dtype = kv_cache_dtype_str_to_dtype(cc.cache_dtype, mc)
    quant = get_kv_quant_mode(cc.cache_dtype)
    layer_types = getattr(hf_config, "layer_types", None) or ["full_attention"] * hf_config.num_hidden_layers
    specs = {}
    for i, kind in enumerate(layer_types):
        name = f"model.layers.{i}.self_attn.attn"
        if mc.use_mla:
            specs[name] = MLAAttentionSpec(block_size=cc.block_size, num_kv_heads=1, max_tp_shards=1,
                                           head_size=mc.get_head_size(), dtype=dtype,
                                           cache_dtype_str=cc.cache_dtype, kv_quant_mode=quant)
        elif kind == "sliding_attention":
            # The block size FlashAttention takes for a sliding layer: the largest kernel block dividing
            # --block-size (attention.py _largest_kernel_block_within, MultipleOf(16)): block_size itself.
            specs[name] = SlidingWindowSpec(block_size=cc.block_size, num_kv_heads=mc.get_num_kv_heads(pc),
                                            head_size=mc.get_head_size(), dtype=dtype, kv_quant_mode=quant,
                                            sliding_window=hf_config.sliding_window)
        else:
            specs[name] = FullAttentionSpec(block_size=cc.block_size, num_kv_heads=mc.get_num_kv_heads(pc),
                                            head_size=mc.get_head_size(), dtype=dtype, kv_quant_mode=quant)
    return specs


def _vllm_config(model_dir: str, case: dict, max_model_len: int):
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig

    mc = ModelConfig(model=model_dir, skip_tokenizer_init=True, max_model_len=max_model_len, dtype="auto")
    vc = VllmConfig(model_config=mc, device_config=DeviceConfig(device="cuda"),
                    cache_config=CacheConfig(block_size=case["block_size"], cache_dtype=case["kv_cache_dtype"]),
                    parallel_config=ParallelConfig(tensor_parallel_size=case["tensor_parallel_size"]),
                    scheduler_config=SchedulerConfig(max_model_len=mc.max_model_len, is_encoder_decoder=False,
                                                     max_num_batched_tokens=case["max_num_batched_tokens"]))
    vc.scheduler_config.disable_hybrid_kv_cache_manager = False  # CUDA supports the hybrid manager
    return vc


def _resolve_layout(vc, specs: dict) -> None:
    """The engine core resolves one KV cache layout before sizing the cache (core.py lines 313-317); a worker
    whose backends declare no layouts reports the default preference (backends/utils.py lines 229-236)."""
    from vllm.v1.attention.backends.utils import _DEFAULT_LAYOUT_PREFERENCE, resolve_kv_cache_layout

    resolve_kv_cache_layout(vc, [[layout.name for layout in _DEFAULT_LAYOUT_PREFERENCE]], list(specs.values()))


def run_case(config_dir: Path, tmp: Path, case: dict) -> dict:
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config, get_kv_cache_capacity

    model_dir = _model_dir(config_dir, case["config"], tmp)
    vc = _vllm_config(model_dir, case, case["max_model_len"])
    specs = _specs(vc, vc.model_config.hf_config)
    available = case["available_memory"]
    _resolve_layout(vc, specs)

    groups = planning.get_global_kv_cache_groups(vc, [dict(specs)])
    builder = planning.get_kv_cache_config_builder(vc)
    block_bytes = planning._pool_bytes_per_block_from_builder(builder, vc, groups)
    needed = planning._max_memory_usage_bytes_from_groups(builder, vc, groups)
    out = dict(case, vllm_version=None, async_scheduling=vc.scheduler_config.async_scheduling,
               max_in_flight_tokens=vc.max_in_flight_tokens,
               groups=[dict(layers=len(g.layer_names), spec=type(g.kv_cache_spec).__name__,
                            page_size_bytes=g.kv_cache_spec.page_size_bytes) for g in groups],
               bytes_per_block=block_bytes, needed_kv_bytes=needed)
    try:
        configs = planning.get_kv_cache_configs(vc, [dict(specs)], [available], groups)
    except ValueError as error:
        out.update(starts=False, error=str(error).split(" Try ")[0])
    else:
        scheduler_config = generate_scheduler_kv_cache_config(configs)
        tokens, concurrency = get_kv_cache_capacity(vc, scheduler_config)
        out.update(starts=True, num_gpu_blocks=scheduler_config.num_blocks, kv_cache_tokens=tokens,
                   max_concurrency=concurrency)

    # The "estimated maximum model length" at the model's whole context (vLLM's own derived max_model_len).
    full = _vllm_config(model_dir, case, None)
    full_len = full.model_config.max_model_len
    full_specs = _specs(full, full.model_config.hf_config)
    _resolve_layout(full, full_specs)
    full_groups = planning.get_global_kv_cache_groups(full, [dict(full_specs)])
    try:
        planning.get_kv_cache_configs(full, [dict(full_specs)], [available],
                                      full_groups)
        estimated = full_len
    except ValueError as error:
        found = re.search(r"estimated maximum model length is (\d+)", str(error))
        estimated = int(found.group(1)) if found else 0
    out.update(derived_max_model_len=full_len, largest_max_model_len=estimated)
    return out


def main(argv: list[str]) -> int:
    import logging

    import vllm

    logging.disable(logging.WARNING)
    config_dir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[2] / "shared" / "configs"
    with tempfile.TemporaryDirectory() as folder:
        results = []
        for case in CASES:
            result = run_case(config_dir, Path(folder), copy.deepcopy(case))
            result["vllm_version"] = vllm.__version__
            results.append(result)
    json.dump({"vllm_version": vllm.__version__,
               "source": "scripts/vllm_kv_reference.py: vLLM's own functions (vllm/v1/core/kv_cache_planning.py, "
                         "kv_cache_utils.py, kv_cache_interface.py) run on the CPU",
               "command": "PYTHONPATH=<vllm-0.34.0 sdist> python scripts/vllm_kv_reference.py ../shared/configs > tests/fixtures/vllm_kv_reference.json",
               "cases": results}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
