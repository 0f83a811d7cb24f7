"""Properties that hold for every input (hypothesis): the sum, the splits, the monotonic directions."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

import vramwise

SPEC = vramwise.load_model({
    "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
    "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
    "tie_word_embeddings": True,
})

settings_st = st.fixed_dictionaries({
    "method": st.sampled_from(["qlora", "lora", "full"]),
    "batch_size": st.integers(1, 64),
    "seq_len": st.integers(1, 32768),
    "lora_rank": st.integers(1, 256),
    "gradient_checkpointing": st.sampled_from(["none", "true", "unsloth"]),
    "optimizer": st.sampled_from(["adamw_8bit", "adamw_torch", "paged_adamw_32bit", "sgd"]),
    "attention": st.sampled_from(["flash_attention_2", "sdpa", "eager"]),
})


@settings(max_examples=200, deadline=None)
@given(settings_st)
def test_total_is_the_sum_and_one_gpu_holds_it(kw):
    e = vramwise.estimate(SPEC, **kw)
    assert e.total == sum(getattr(e, c) for c in vramwise.COMPONENTS)
    assert e.min_per_gpu(1) == e.total
    assert all(getattr(e, c) >= 0 for c in vramwise.COMPONENTS)
    mins = [e.min_per_gpu(n) for n in (1, 2, 4, 8)]
    assert mins == sorted(mins, reverse=True)
    assert e.min_per_gpu(8) >= e.activations + e.overhead


@settings(max_examples=100, deadline=None)
@given(settings_st, st.integers(1, 8))
def test_more_tokens_never_need_less_memory(kw, factor):
    a = vramwise.estimate(SPEC, **kw)
    b = vramwise.estimate(SPEC, **{**kw, "batch_size": kw["batch_size"] * factor})
    assert b.activations >= a.activations and b.total >= a.total


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 128))
def test_adapters_grow_linearly_with_rank(r):
    one = vramwise.estimate(SPEC, lora_rank=1)
    assert vramwise.estimate(SPEC, lora_rank=r).params_trainable == r * one.params_trainable


# -- multi-GPU strategies (profile hf) ---------------------------------------------------------------

hf_settings_st = st.fixed_dictionaries({
    "method": st.sampled_from(["qlora", "lora", "full"]),
    "batch_size": st.integers(1, 16),
    "seq_len": st.integers(1, 16384),
    "gradient_checkpointing": st.sampled_from(["none", "true"]),
    "optimizer": st.sampled_from(["adamw_8bit", "adamw_torch", "adamw_torch_fused", "sgd"]),
    "offload": st.sampled_from(["none", "optimizer", "parameters"]),
})
SHARDING = ["fsdp", "fsdp_shard_grad_op", "fsdp_hybrid", "zero1", "zero2", "zero3"]


@settings(max_examples=150, deadline=None)
@given(hf_settings_st, st.sampled_from(SHARDING), st.sampled_from([1, 2, 4, 8]))
def test_sharding_per_rank_never_grows_with_more_ranks(kw, strategy, gpn):
    if strategy.startswith("fsdp") and kw["offload"] == "optimizer":
        kw = {**kw, "offload": "parameters"}  # FSDP offloads everything or nothing (a warning says so)
    ests = [vramwise.estimate(SPEC, profile="hf", strategy=strategy, world_size=n, gpus_per_node=gpn, **kw)
            for n in (1, 2, 3, 4, 8, 16, 128)]
    # torch's reserve never grows with more ranks; the device total neither from two ranks on (one rank holds no
    # NCCL communicator, two or more one each: formulas/shared/constants.yaml nccl_communicator_bytes)
    reserved = [e.figures["reserved"] for e in ests]
    totals = [e.total for e in ests]
    assert reserved == sorted(reserved, reverse=True), reserved
    assert totals[1:] == sorted(totals[1:], reverse=True), totals


@settings(max_examples=150, deadline=None)
@given(hf_settings_st.map(lambda kw: {**kw, "offload": "none"}), st.integers(2, 512))
def test_ddp_is_one_gpu_plus_its_gradient_buckets(kw, n):
    one = vramwise.estimate(SPEC, profile="hf", **kw)
    ddp = vramwise.estimate(SPEC, profile="hf", strategy="ddp", world_size=n, **kw)
    buckets = ddp.figures["buffers"]
    grads = next(t.value for t in one.trace if t.id == "gradient_bytes")
    assert buckets == -(-grads // 1)  # every trainable gradient once, in its dtype
    assert abs(ddp.figures["tensor_peak"] - (one.figures["tensor_peak"] + buckets)) <= 1  # rounding of the 8-bit states
    assert ddp.total >= one.total and ddp.host_bytes == 0
