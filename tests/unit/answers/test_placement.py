"""The placement rule "fits on n GPUs" and the inference per-GPU split, with figures derived by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vramwise
from vramwise.answers.placement import (GpuSet, InferenceSplit, fits, inference_split, per_gpu_bytes, pooled_bytes, rule_text,
                                        spare_per_gpu)
from vramwise.surfaces.cli.main import main

GIB = 2**30
EXAMPLE = str(Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")


class _Run:
    """An estimate as the rule sees it: a total, a per-GPU minimum for each count, maybe a strategy."""

    def __init__(self, total: int, per_gpu: dict, strategy: str | None = None):
        self.total, self._per_gpu, self.strategy = total, per_gpu, strategy

    def min_per_gpu(self, n: int) -> int:
        return self._per_gpu[n]


def test_a_set_of_gpus_pools_the_first_in_full_and_a_share_of_the_others():
    two = GpuSet.of([40 * GIB, 30 * GIB])
    assert (two.count, two.smallest, two.first, two.further) == (2, 30 * GIB, 40 * GIB, 30 * GIB)
    assert pooled_bytes(two, 0.85) == pytest.approx(65.5 * GIB)  # 40 + 0.85 x 30
    three = GpuSet.alike(24 * GIB, 3)  # 24 + 0.85 x 48 = 64.8 GiB
    assert (three.count, three.smallest, three.first, three.further) == (3, 24 * GIB, 24 * GIB, 48 * GIB)
    assert pooled_bytes(three, 0.85) == pytest.approx(64.8 * GIB)
    with pytest.raises(ValueError):
        GpuSet.of([])


def test_each_gpu_must_hold_the_per_gpu_minimum():
    run = _Run(60 * GIB, {2: 31 * GIB})
    assert not fits(run, GpuSet.of([40 * GIB, 30 * GIB]), 0.85)  # pooled 65.5 GiB covers 60, but 30 < 31
    assert fits(run, GpuSet.of([40 * GIB, 32 * GIB]), 0.85)  # 32 >= 31 and 40 + 27.2 = 67.2 >= 60
    assert spare_per_gpu(run, GpuSet.of([40 * GIB, 32 * GIB])) == 1 * GIB  # the smaller GPU: 32 - 31
    assert spare_per_gpu(run, GpuSet.of([40 * GIB, 30 * GIB])) == -1 * GIB  # short by 31 - 30


def test_without_a_strategy_the_pool_must_cover_the_total():
    run = _Run(70 * GIB, {2: 31 * GIB})
    assert not fits(run, GpuSet.of([40 * GIB, 32 * GIB]), 0.85)  # 67.2 GiB < 70 GiB
    assert fits(run, GpuSet.of([40 * GIB, 32 * GIB]), 1.0)  # a full share pools 72 GiB


def test_a_strategy_places_the_model_itself():
    run = _Run(70 * GIB, {2: 31 * GIB}, strategy="fsdp")
    assert fits(run, GpuSet.of([40 * GIB, 32 * GIB]), 0.85)  # each rank's 31 GiB fits its GPU; the pool is not asked
    assert not fits(run, GpuSet.of([40 * GIB, 30 * GIB]), 0.85)


def test_the_rule_in_words():
    assert rule_text(None, 1, 1000, 0.85) == "fits when the per-GPU minimum for 1 GPU(s) is at most 1,000 bytes and the total fits"
    assert rule_text(None, 3, 1000, 0.85) == ("fits when the per-GPU minimum for 3 GPU(s) is at most 1,000 bytes and "
                                              "1,000 x (1 + 0.85 x 2) covers the total")
    assert rule_text("ddp", 2, 1000, 0.85) == "fits when each of the 2 rank(s) of strategy ddp needs at most 1,000 bytes"


def test_inference_splits_weights_and_kv_cache_and_keeps_the_overhead_on_each_gpu():
    split = InferenceSplit(weights=10, kv_cache=5, overhead=2, total=17, rule_total=12)
    assert split.per_gpu(1) == 17
    assert split.per_gpu(2) == 8 + 2  # 15 / 2 = 7.5, rounded up
    assert split.per_gpu(4) == 4 + 2  # 15 / 4 = 3.75, rounded up
    assert split.per_gpu(15) == 1 + 2


def test_inference_split_of_a_real_estimate():
    e = vramwise.estimate(EXAMPLE, method="inference", batch_size=2, seq_len=4096)
    split = inference_split(e)
    kv, total = e.figures["kv_cache"], e.figures["kv_cache_total"]
    assert (split.weights, split.kv_cache, split.total, split.rule_total) == (e.weights, kv, total, e.total)
    assert split.overhead == total - e.weights - kv
    assert per_gpu_bytes(e, [1, 3]) == {1: total, 3: -(-(e.weights + kv) // 3) + split.overhead}
    assert inference_split(vramwise.estimate(EXAMPLE)) is None  # training has no KV-cache answer


def test_per_gpu_bytes_of_training_and_of_a_strategy():
    e = vramwise.estimate(EXAMPLE, method="lora")
    assert per_gpu_bytes(e, [1, 2]) == {1: e.min_per_gpu(1), 2: e.min_per_gpu(2)}
    s = vramwise.estimate(EXAMPLE, profile="hf", method="full", optimizer="adamw_torch", strategy="fsdp", world_size=4)
    assert per_gpu_bytes(s, [1, 2, 8]) == {4: s.total}  # a strategy runs on its own world size only


def test_estimate_json_and_fit_use_the_same_placement(capsys):
    assert main(["estimate", EXAMPLE, "--method", "inference", "--gpus", "1,2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    e = vramwise.estimate(EXAMPLE, method="inference")
    split = inference_split(e)
    assert data["min_per_gpu"] == {"1": split.per_gpu(1), "2": split.per_gpu(2)}
    assert data["min_per_gpu_rule"] == {"1": e.min_per_gpu(1), "2": e.min_per_gpu(2)}
    f = vramwise.fit(EXAMPLE, gpu=24 * GIB, method="full", optimizer="adamw_torch")
    k = f.min_gpus
    assert fits(f.estimate, GpuSet.alike(f.usable_bytes, k), f.further_gpu_share)
    assert not fits(f.estimate, GpuSet.alike(f.usable_bytes, k - 1), f.further_gpu_share)
