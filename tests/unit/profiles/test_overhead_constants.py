"""The device constants beside the tensors, by hand: the caching allocator's reserve and the CUDA context of
the training profiles (formulas/shared/overhead.yaml: 15 % over the tensor peak for litgpt and for hf's and
torchtune's full fine-tuning; for their LoRA and QLoRA a share of the activations at the peak, 29 % (hf) or 26 %
(torchtune) with gradient checkpointing, 9 % or 8 % without, formulas/hf/reserve.yaml and
formulas/torchtune/reserve.yaml; 0.5 GiB of CUDA context), the NCCL communicator's buffers
on each rank of a data-parallel strategy on two GPUs or more (1.6 GB, formulas/shared/constants.yaml), the studio
profile's fixed CUDA overhead (docs/unsloth-profile.md#overhead: 1.4 GiB a GPU, none for inference, which
its headroom covers), and vLLM's memory
outside torch and CUDA context (formulas/vllm/budget.yaml, from published vLLM 0.17-0.19 start-up logs:
"non-torch forward increase memory" 0.25 GiB at TP 1, 2.1 GiB with tensor parallelism, 0.07 GiB with
pipeline stages only; the CUDA context 0.51 GiB on one GPU, 1.51 GiB with several ranks; docs/serving.md).
The regression oracle holds the figures too; these tests say which constant moved."""

from __future__ import annotations

from pathlib import Path

import pytest

import vramwise

LLAMA = str(Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")
GIB = 2**30


def _values(e) -> dict:
    return {t.id: t.value for t in e.trace}


@pytest.mark.parametrize("profile, method", [("hf", "full"), ("torchtune", "full"), ("litgpt", "lora")])
def test_one_gpu_device_figure_is_the_peak_plus_15_percent_plus_half_a_gib(profile, method):
    e = vramwise.estimate(LLAMA, profile=profile, method=method)
    peak = _values(e)["tensor_peak_bytes"]
    # device = peak x (1 + 0.15) + 0.5 GiB (536,870,912 bytes)
    assert abs(e.total - (peak * 115 / 100 + GIB / 2)) <= 1
    assert abs(e.overhead - (peak * 15 / 100 + GIB / 2)) <= 1


@pytest.mark.parametrize("method", ["lora", "qlora"])
@pytest.mark.parametrize("profile, checkpointing, ratio", [("hf", "true", 29), ("hf", "none", 9),
                                                           ("torchtune", "true", 26), ("torchtune", "none", 8)])
def test_lora_reserve_is_a_share_of_the_activations_at_the_peak(profile, method, checkpointing, ratio):
    # formulas/shared/constants.yaml: allocator_reserve_checkpointed_ratio 0.29 and allocator_reserve_saved_ratio
    # 0.09 (hf), torchtune_reserve_checkpointed_ratio 0.26 and torchtune_reserve_saved_ratio 0.08
    e = vramwise.estimate(LLAMA, profile=profile, method=method, gradient_checkpointing=checkpointing)
    v = _values(e)
    peak, activations = v["tensor_peak_bytes"], v["activations_at_peak_bytes"]
    assert activations == e.activations > 0
    # reserved = peak + activations x the ratio; device = reserved + 0.5 GiB
    assert abs(e.figures["reserved"] - (peak + activations * ratio / 100)) <= 1
    assert abs(e.total - (peak + activations * ratio / 100 + GIB / 2)) <= 1
    # the weights, adapters and optimizer state carry none: the overhead is the activations' share and the context
    assert abs(e.overhead - (activations * ratio / 100 + GIB / 2)) <= 1


def test_hf_lora_device_map_charges_each_gpu_the_share_of_its_bytes_above_the_resident_ones():
    e = vramwise.estimate(LLAMA, profile="hf", method="lora", gradient_checkpointing="true", strategy="device_map",
                          world_size=2)
    v = _values(e)
    for gpu in ("first", "last"):
        peak, resident = v[f"{gpu}_tensor_peak_bytes"], v[f"{gpu}_resident_bytes"]
        # reserved = peak + (peak - resident) x 0.29; device = reserved + 0.5 GiB
        assert abs(v[f"{gpu}_reserved_bytes"] - (peak + (peak - resident) * 29 / 100)) <= 1
        assert abs(v[f"{gpu}_device_bytes"] - (peak + (peak - resident) * 29 / 100 + GIB / 2)) <= 1
    busiest = "first" if v["first_device_bytes"] >= v["last_device_bytes"] else "last"
    assert abs(e.figures["reserved"] - v[f"{busiest}_reserved_bytes"]) <= 1


def test_studio_charges_a_fixed_1_4_gib_for_training_only():
    # the estimator's overhead, which the studio profile keeps: 1.4 x 2^30 = 1,503,238,553.6 bytes, a whole byte
    assert vramwise.estimate(LLAMA, profile="studio", method="lora").overhead == 1_503_238_554
    assert vramwise.estimate(LLAMA, profile="studio", method="inference").overhead == 0


def test_each_rank_of_a_strategy_gets_the_same_reserve_and_context_and_nccl_buffers():
    # device = peak x 1.15 + 0.5 GiB + the NCCL communicator's 1.6 GB (1,600,000,000 bytes) on each rank
    e = vramwise.estimate(LLAMA, profile="hf", method="full", strategy="zero3", world_size=2)
    peak = _values(e)["rank_tensor_peak_bytes"]
    assert abs(e.min_per_gpu(2) - (peak * 115 / 100 + GIB / 2 + 1_600_000_000)) <= 1
    assert abs(e.figures["reserved"] - peak * 115 / 100) <= 1


@pytest.mark.parametrize("strategy, world_size, nccl", [
    ("fsdp", 2, 1_600_000_000), ("ddp", 8, 1_600_000_000),  # one communicator a rank, at any count
    ("fsdp", 1, 0),  # one rank: no peer, no communicator's buffers
    ("device_map", 2, 0),  # one process over the GPUs: no collective, no NCCL
])
def test_nccl_buffers_only_where_ranks_talk(strategy, world_size, nccl):
    kw = dict(profile="hf", method="qlora", strategy=strategy, world_size=world_size)
    if strategy == "fsdp" and world_size == 1:
        kw["offload"] = "parameters"
    e = vramwise.estimate(LLAMA, **kw)
    v = _values(e)
    if strategy == "device_map":
        assert "rank_nccl_bytes" not in v
    else:
        assert v["rank_nccl_bytes"] == nccl and e.figures["nccl"] == nccl  # shown apart as a figure too
        assert abs(e.figures["device"] - (e.figures["reserved"] + GIB / 2 + nccl)) <= 1


@pytest.mark.parametrize("tp, pp, non_torch, context", [
    (1, 1, 0.25, 0.51),  # 0.25 GiB = 268,435,456; 0.51 GiB = 547,608,330
    (2, 1, 2.1, 1.51),  # 2.1 GiB = 2,254,857,830; 1.51 GiB = 1,621,350,154
    (1, 2, 0.07, 1.51),  # 0.07 GiB = 75,161,928
])
def test_vllm_memory_outside_torch_and_cuda_context(tp, pp, non_torch, context):
    kw = dict(profile="vllm", method="inference", gpu_memory=80 * GIB, tensor_parallel_size=tp,
              pipeline_parallel_size=pp)
    e = vramwise.estimate(LLAMA, vllm_version="0.8.5", **kw)
    v = _values(e)
    assert e.figures["non_torch"] == round(non_torch * GIB)
    assert v["context_memory_bytes"] == round(context * GIB)
    # 0.8 and 0.9 count the whole device's memory outside torch: the context is in "non KV cache memory"
    parts = v["serving_weights_bytes"] + v["activation_peak_bytes"] + v["non_torch_bytes"] + v["cuda_graph_bytes"]
    assert v["non_kv_bytes"] == parts + round(context * GIB)
    # from 0.10 only what the profiling run adds
    later = _values(vramwise.estimate(LLAMA, vllm_version="0.10.0", **kw))
    assert later["non_kv_bytes"] == (later["serving_weights_bytes"] + later["activation_peak_bytes"]
                                     + later["non_torch_bytes"] + later["cuda_graph_bytes"])
