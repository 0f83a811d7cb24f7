"""fit's answers agree with estimate: every answer fits, and one step more does not."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vramwise
from vramwise.answers.fit import _fits, fit
from helpers import CONFIGS, from_shared, shared_present

GIB = 2**30
EXAMPLE = str(__import__("pathlib").Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")
NAMES = ["meta-llama__Llama-3.1-8B.json", "Qwen__Qwen3-0.6B.json", "google__gemma-2-2b-it.json",
         "mistralai__Mixtral-8x7B-v0.1.json", "Qwen__Qwen3-30B-A3B.json", "deepseek-ai__DeepSeek-V2-Lite.json",
         "microsoft__phi-4.json", "google__gemma-3-1b-it.json", "HuggingFaceTB__SmolLM2-360M-Instruct.json",
         "Qwen__Qwen2.5-7B-Instruct.json"]


def _configs():
    """Ten real configs of ../shared, else the bundled example (and a set that skips naming the corpus)."""
    return [str(CONFIGS / n) for n in NAMES] if shared_present() else from_shared([EXAMPLE])


def _check(model, gpu, method, profile="unsloth", **s):
    f = fit(model, gpu=gpu, method=method, profile=profile, **s)
    n, usable, share = f.gpus, f.usable_bytes, f.further_gpu_share
    base = dict(f.settings)
    base.pop("target_modules")

    def ok(**changes):
        return _fits(vramwise.estimate(model, profile=profile, **{**base, **changes}), n, usable, share)

    if f.max_batch_size is not None:
        assert ok(batch_size=f.max_batch_size) and not ok(batch_size=f.max_batch_size + 1)
    else:
        assert not ok(batch_size=1)
    if f.max_seq_len_memory is not None:  # what memory allows; the answer stops at the context window
        assert ok(seq_len=f.max_seq_len_memory) and not ok(seq_len=f.max_seq_len_memory + 1)
        cap = f.context_window if f.context_window is not None else f.max_seq_len_memory
        assert f.max_seq_len == min(f.max_seq_len_memory, cap)
    else:
        assert f.max_seq_len is None
    if f.max_lora_rank is not None:
        assert ok(lora_rank=f.max_lora_rank) and (f.max_lora_rank == 65536 or not ok(lora_rank=f.max_lora_rank + 1))
    if f.min_gpus is not None:
        e = vramwise.estimate(model, profile=profile, **base)
        assert _fits(e, f.min_gpus, usable, share) and (f.min_gpus == 1 or not _fits(e, f.min_gpus - 1, usable, share))
    for seq, batch in f.frontier:
        if batch is not None:
            assert ok(seq_len=seq, batch_size=batch) and (batch == 2**20 or not ok(seq_len=seq, batch_size=batch + 1))
    assert f.fits == ok()
    return f


@pytest.mark.parametrize("model", _configs())
@pytest.mark.parametrize("gpu", [24 * GIB, 40 * GIB, 80 * GIB])
@pytest.mark.parametrize("method", ["qlora", "lora", "full"])
def test_answers_are_exact(model, gpu, method):
    _check(model, gpu, method, seq_len=1024)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gpu_gib=st.integers(min_value=4, max_value=200),
    method=st.sampled_from(["qlora", "lora", "full"]),
    profile=st.sampled_from(["unsloth", "hf"]),
    gc=st.sampled_from(["none", "true", "unsloth"]),
    attention=st.sampled_from(["sdpa", "eager", "flash_attention_2"]),
    gpus=st.integers(min_value=1, max_value=8),
    headroom=st.sampled_from([0.0, 0.1]),
)
def test_answers_are_exact_for_random_settings(gpu_gib, method, profile, gc, attention, gpus, headroom):
    if profile == "hf" and gc == "unsloth":
        gc = "true"
    f = fit(EXAMPLE, gpu=gpu_gib * GIB, gpus=gpus, headroom=headroom, method=method, profile=profile,
            gradient_checkpointing=gc, attention=attention, seq_lens=(512, 4096))
    assert f.usable_bytes == int(gpu_gib * GIB * (1 - headroom))
    _check(EXAMPLE, gpu_gib * GIB, method, profile=profile, gpus=gpus, headroom=headroom,
           gradient_checkpointing=gc, attention=attention, seq_lens=(512, 4096))


def test_the_selection_rule_on_several_gpus():
    # 8B full fine-tuning with adamw_torch needs far more than one 24 GiB GPU
    f = fit(EXAMPLE, gpu=24 * GIB, method="full", optimizer="adamw_torch")
    e = f.estimate
    k = f.min_gpus
    # on k GPUs: each holds its share of the model state plus activations and overhead, and the first GPU
    # plus 85 % of the others covers the total (select_gpus' rule)
    assert e.min_per_gpu(k) <= 24 * GIB and e.total <= 24 * GIB * (1 + 0.85 * (k - 1))
    assert not (e.min_per_gpu(k - 1) <= 24 * GIB and e.total <= 24 * GIB * (1 + 0.85 * (k - 2)))


def test_bad_inputs():
    with pytest.raises(vramwise.SettingsError, match="headroom"):
        fit(EXAMPLE, gpu=24 * GIB, headroom=0.95)
    with pytest.raises(vramwise.SettingsError, match="gpus"):
        fit(EXAMPLE, gpu=24 * GIB, gpus=0)
    with pytest.raises(vramwise.SettingsError, match="gpu memory"):
        fit(EXAMPLE, gpu=-5)


def test_json():
    f = fit(EXAMPLE, gpu=24 * GIB)
    data = json.loads(json.dumps(f.to_dict(), allow_nan=False))
    assert data["max_batch_size"] == f.max_batch_size and len(data["frontier"]) == 16


def test_the_gpu_target_carries_how_its_name_was_matched():
    # the answer holds the catalog's match of the name asked for, so that a surface prints how it was
    # matched (an ambiguous name's alternatives, the reading its figure is) without resolving it again
    from vramwise.inputs.gpu_catalog import gpu_spec

    for query in ("H100", "RTX 4090", "24GiB"):
        f = fit(EXAMPLE, gpu=query)
        assert f.gpu.matched == gpu_spec(query) and f.gpu.memory_bytes == gpu_spec(query).memory_bytes
    assert fit(EXAMPLE, gpu="24GiB").gpu.matched.matched_by == "size"
    assert fit(EXAMPLE, gpu=24 * GIB).gpu.matched is None  # bytes given: nothing was matched
    assert "matched" not in fit(EXAMPLE, gpu="H100").gpu.to_dict()  # the JSON answer is as before
