"""The vllm profile reproduces vLLM's start-up arithmetic (docs/serving.md), checked on small configs whose
figures are worked out by hand below from vLLM's rules (the files and lines formulas/vllm cites) and the
profile's calibrated constants (formulas/vllm/budget.yaml, read here as inputs, not as answers)."""

from __future__ import annotations

import math

import pytest

import vramwise

GIB = 2**30
H100 = 85_029_615_043  # 79.19 GiB, the total torch reports on an H100 SXM (hardware/gpus.yaml cuda_total_bytes)
# budget.yaml's constants
LOGIT_0_17, LOGIT_OLD = 14.45, 37.85
NON_TORCH, NON_TORCH_TP = 268_435_456, 2_254_857_830
CG_BASE, CG_LAYER = 429_496_730, 14_326_718
CONTEXT = 547_608_330

# A Llama-3.1-8B-shaped model: 32 layers, hidden 4096, 32 heads, 8 KV heads of 128, MLP 14336, vocab 128256.
LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
         "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 131072,
         "rope_scaling": {"factor": 8.0, "rope_type": "llama3", "original_max_position_embeddings": 8192},
         "tie_word_embeddings": False}
# parameters: per layer q, o 4096 x 4096; k, v 1024 x 4096; gate, up, down 14336 x 4096; two norms of 4096
LAYER = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096 + 2 * 4096  # 218,112,000
PARAMS = 32 * LAYER + 2 * 128256 * 4096 + 4096  # embedding, untied head, final norm: 8,030,261,248


def est(config=LLAMA, **settings):
    return vramwise.estimate(config, profile="vllm", method="inference", **settings)


def test_llama_on_an_h100_at_0_19_as_vllm_sizes_it():
    e = est(gpu_memory=H100, vllm_version="0.19.0", gpu_memory_utilization=0.95, max_model_len=8192)
    f = e.figures
    assert PARAMS == 8_030_261_248 == e.params_total
    # weights: 2 bytes each (128256 = 2004 x 64 rows: no vocabulary padding)
    weights = 2 * PARAMS
    assert f["weights"] == weights
    # vllm serve on a >= 70 GiB GPU that is not an A100: 8192 batched tokens, 1024 sequences
    assert (f["max_num_batched_tokens"], f["max_num_seqs"]) == (8192, 1024)
    # profiling peak: hidden states and residual of 8192 tokens in bf16, and the sampler's 1024 x 128256 logits
    peak = 2 * 8192 * 4096 * 2 + 1024 * 128256 * LOGIT_0_17
    assert f["activation_peak"] == round(peak)
    # 0.19 does not subtract CUDA graphs; requested = ceil(total x 0.95)
    assert f["cuda_graphs"] == 0
    available = math.ceil(H100 * 0.95) - (weights + peak + NON_TORCH)
    assert abs(f["available_kv"] - available) <= 1  # whole bytes of a float sum
    # a page: 16 tokens x 8 heads x (128 + 128) x 2 bytes = 65,536; a block spans the 32 layers
    block = 32 * 16 * 8 * 256 * 2
    blocks = int(available // block)
    assert f["num_gpu_blocks"] == blocks
    # up to 0.20.0 the log's tokens are blocks x block_size; concurrency: blocks / cdiv(8192, 16)
    assert f["kv_cache_tokens"] == blocks * 16
    assert f["max_concurrency"] == pytest.approx(blocks / 512)
    assert e.serving == {"starts": True, "kv_cache_tokens": blocks * 16, "max_concurrency": pytest.approx(blocks / 512),
                         # one request may use every block: blocks x 16 tokens, capped at the model's 131,072
                         "largest_max_model_len": min(131072, blocks * 16)}


def test_release_defaults_utilization_graphs_and_the_token_count():
    # 0.19: utilization 0.9; 0.20: 0.92 and CUDA graphs subtracted (0.4 GiB + 0.0133 GiB a layer);
    # 0.34: all of the GPU, less the CUDA context and a safety margin of max(1 GiB, 0.75 x the peak)
    weights = 2 * PARAMS
    peak = 2 * 8192 * 4096 * 2 + 1024 * 128256 * LOGIT_0_17
    graphs = CG_BASE + 32 * CG_LAYER
    block = 32 * 16 * 8 * 256 * 2
    a19 = est(gpu_memory=H100, vllm_version="0.19.0", max_model_len=1000).figures
    assert a19["requested"] == math.ceil(H100 * 0.9)
    a20 = est(gpu_memory=H100, vllm_version="0.20.2", max_model_len=1000).figures
    assert a20["requested"] == math.ceil(H100 * 0.92) and a20["cuda_graphs"] == graphs
    avail20 = math.ceil(H100 * 0.92) - (weights + peak + NON_TORCH + graphs)
    blocks20 = int(avail20 // block)
    # from 0.20.2 the log's tokens are int(concurrency x max_model_len): 1000 tokens take cdiv(1000, 16) = 63 blocks
    assert a20["kv_cache_tokens"] == int(blocks20 / 63 * 1000)
    a34 = est(gpu_memory=H100, vllm_version="0.34.0", max_model_len=1024).figures
    margin = max(GIB, 0.75 * peak)
    avail34 = min(H100, H100 - CONTEXT - margin) - (weights + peak + NON_TORCH + graphs)
    assert abs(a34["available_kv"] - avail34) <= 1  # whole bytes of a float sum
    # 0.34's default block is 64 tokens: a block spans 32 layers x 64 x 8 x 256 x 2 bytes
    assert a34["block_size"] == 64 and a34["num_gpu_blocks"] == int(avail34 // (32 * 64 * 8 * 256 * 2))
    # enforce_eager: no CUDA graphs
    assert est(gpu_memory=H100, vllm_version="0.20.2", enforce_eager=True).figures["cuda_graphs"] == 0
    # before 0.10 vLLM counts all memory outside torch, the CUDA context included
    a08 = est(gpu_memory=H100, vllm_version="0.8.5", max_model_len=8192).figures
    peak08 = 2 * 8192 * 4096 * 2 + 1024 * 128256 * LOGIT_OLD
    assert abs(a08["available_kv"] - (math.ceil(H100 * 0.9) - (weights + peak08 + NON_TORCH + CONTEXT))) <= 1


def test_small_gpu_defaults_and_a100():
    small = est(gpu_memory=24 * GIB, vllm_version="0.19.0", max_model_len=4096).figures
    assert (small["max_num_batched_tokens"], small["max_num_seqs"]) == (2048, 256)
    a100 = est(gpu="A100 80GB", vllm_version="0.19.0", max_model_len=4096).figures
    assert (a100["max_num_batched_tokens"], a100["max_num_seqs"]) == (2048, 256)  # an A100 is never "large"
    # defaults capped by max_num_seqs x max_model_len
    assert est(gpu_memory=H100, max_num_seqs=2, max_model_len=1000).figures["max_num_batched_tokens"] == 2000


def test_tensor_parallel_splits_heads_and_replicates_below_one_a_rank():
    # 8 KV heads: TP 4 leaves 2 a rank; TP 16 would leave 0.5, so every rank caches one (replicated)
    page = {tp: est(gpu_memory=H100, tensor_parallel_size=tp, max_model_len=8192).figures for tp in (1, 4, 16)}
    block = {tp: page[tp]["kv_cache_bytes"] // page[tp]["num_gpu_blocks"] for tp in page}
    assert block[1] == 32 * 64 * 8 * 256 * 2
    assert block[4] == 32 * 64 * 2 * 256 * 2
    assert block[16] == 32 * 64 * 1 * 256 * 2
    # weights: layers and vocabulary rows split by 4, the norms whole on every rank
    norms = 32 * 2 * 4096 + 4096
    assert page[4]["weights"] == round(((PARAMS - norms) / 4 + norms) * 2)
    # more than one rank adds the all-reduce buffers outside torch
    assert page[4]["non_torch"] == NON_TORCH_TP


def test_fp8_cache_halves_the_page():
    auto = est(gpu_memory=H100, max_model_len=8192).figures
    fp8 = est(gpu_memory=H100, max_model_len=8192, kv_cache_dtype="fp8").figures
    assert auto["kv_cache_bytes"] // auto["num_gpu_blocks"] == 2 * (fp8["kv_cache_bytes"] // fp8["num_gpu_blocks"])


def test_pipeline_stage_holds_its_layers():
    # 32 layers over 3 stages: 10 each, the remainder 2 to the stages before the last: the busiest holds 11
    f = est(gpu_memory=H100, pipeline_parallel_size=3, max_model_len=8192).figures
    assert f["kv_cache_bytes"] // f["num_gpu_blocks"] == 11 * 64 * 8 * 256 * 2


# gpt-oss-shaped: 24 layers alternating sliding (window 128) and full, 8 KV heads of 64
OSS = {"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "num_attention_heads": 64,
       "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 24, "num_local_experts": 32,
       "num_experts_per_tok": 4, "vocab_size": 201088, "sliding_window": 128, "max_position_embeddings": 131072,
       "layer_types": ["sliding_attention", "full_attention"] * 12, "tie_word_embeddings": False}


def test_sliding_window_layers_form_their_own_group():
    e = est(OSS, gpu_memory=H100, vllm_version="0.27.1", max_model_len=32768)
    f = e.figures
    # 12 sliding and 12 full layers: two groups of 12; a block: 12 layers x 16 x 8 x 128 x 2 bytes
    block = 12 * 16 * 8 * 128 * 2
    assert f["kv_cache_bytes"] == f["num_gpu_blocks"] * block
    # one request: cdiv(32768, 16) blocks for the full group; the sliding group holds its window and the
    # batches in flight (0.26+: async scheduling, 2 x 8192 tokens): cdiv(127 + 16384, 16) + 1
    request = 32768 // 16 + (math.ceil((127 + 2 * 8192) / 16) + 1)
    assert f["max_concurrency"] == pytest.approx(f["num_gpu_blocks"] / request)
    assert f["needed_kv"] == block * request


def test_latent_attention_uses_64_token_blocks_and_is_not_split():
    mla = {"model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
           "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 4, "vocab_size": 102400,
           "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "q_lora_rank": None,
           "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
           "max_position_embeddings": 163840}
    for tp in (1, 2):
        f = est(mla, gpu_memory=H100, vllm_version="0.19.0", tensor_parallel_size=tp, max_model_len=8192).figures
        # FlashMLA: 64-token blocks; a page holds 64 x (512 + 64) latent elements x 2 bytes, whole on every rank
        assert f["block_size"] == 64
        assert f["kv_cache_bytes"] // f["num_gpu_blocks"] == 4 * 64 * 576 * 2


def test_refusals_and_the_longest_context_that_starts():
    # on a 20 GiB GPU at 0.9: 18 GiB less 15 GiB of weights and the profiling peak leaves about 1 GiB of cache
    f = est(gpu_memory=20 * GIB, vllm_version="0.19.0", max_model_len=131072).figures
    assert f["starts"] == 0 and f["needed_kv"] == 131072 // 16 * 32 * 16 * 8 * 256 * 2  # 16 GiB for 131,072 tokens
    blocks = f["available_kv"] // (32 * 16 * 8 * 256 * 2)
    assert f["largest_max_model_len"] == blocks * 16
    ok = est(gpu_memory=20 * GIB, vllm_version="0.19.0", max_model_len=blocks * 16).figures
    too_long = est(gpu_memory=20 * GIB, vllm_version="0.19.0", max_model_len=blocks * 16 + 16).figures
    assert (ok["starts"], too_long["starts"]) == (1, 0)
    # nothing left: no cache at all
    none = est(gpu_memory=16 * GIB, vllm_version="0.19.0", max_model_len=1024)
    assert none.figures["available_kv"] == 0 and none.serving["starts"] is False
    assert none.serving["largest_max_model_len"] is None


def test_a_context_beyond_the_models_own_is_refused_with_a_warning():
    e = est(gpu_memory=H100, max_model_len=262144)
    assert e.serving["starts"] is False
    assert any("VLLM_ALLOW_LONG_MAX_MODEL_LEN" in w for w in e.warnings)


def test_derived_context_follows_rope_scaling():
    # llama3 scaling is not applied (131,072 stays); yarn scales original_max_position_embeddings
    assert est(gpu_memory=H100).figures["max_model_len"] == 131072
    yarn = {**LLAMA, "max_position_embeddings": 40960,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    assert est(yarn, gpu_memory=H100).figures["max_model_len"] == 4 * 32768
    plain = {k: v for k, v in LLAMA.items() if k != "rope_scaling"}
    assert est({**plain, "max_position_embeddings": 4096}, gpu_memory=H100).figures["max_model_len"] == 4096


def test_the_gpu_is_required_and_named_once():
    with pytest.raises(vramwise.SettingsError, match="give the GPU"):
        est()
    by_name = est(gpu="H100")
    assert by_name.settings.gpu_memory == H100 and by_name.settings.gpu == "h100-sxm"
    with pytest.raises(vramwise.SettingsError, match="give one of them"):
        est(gpu="H100", gpu_memory=80 * 10**9)
    assert est(gpu_memory="79.19GiB").settings.gpu_memory == round(79.19 * GIB)
    for bad in (dict(gpu_memory_utilization=1.5), dict(vllm_version="0.7.3"), dict(vllm_version="x"),
                dict(block_size=24), dict(kv_cache_dtype="int4"), dict(tensor_parallel_size=0), dict(gpu_memory=1000)):
        with pytest.raises(vramwise.SettingsError):
            est(gpu_memory=H100, **{k: v for k, v in bad.items() if k != "gpu_memory"}) if "gpu_memory" not in bad \
                else est(**bad)


def test_serving_settings_on_a_training_estimate_are_reported_unused():
    e = vramwise.estimate(LLAMA, method="lora", profile="hf", tensor_parallel_size=2)
    assert any("tensor_parallel_size=2" in w and "does not apply" in w for w in e.warnings)


def test_fit_answers_context_concurrency_and_utilization():
    f = vramwise.fit(LLAMA, gpu="H100", profile="vllm", method="inference", vllm_version="0.19.0", max_model_len=32768)
    e = f.estimate
    assert f.starts and f.largest_max_model_len == e.serving["largest_max_model_len"]
    assert f.max_concurrency == e.serving["max_concurrency"]
    # the utilization found is the smallest hundredth that starts
    u = f.utilization_needed
    starts = lambda x: est(gpu="H100", vllm_version="0.19.0", max_model_len=32768,  # noqa: E731
                           gpu_memory_utilization=x).serving["starts"]
    assert starts(u) and not starts(round(u - 0.01, 2))
    assert [row[0] for row in f.by_tp_size] == [1, 2, 4, 8]
    with pytest.raises(vramwise.SettingsError, match="--tensor-parallel-size"):
        vramwise.fit(LLAMA, gpu="H100", gpus=2, profile="vllm", method="inference")
