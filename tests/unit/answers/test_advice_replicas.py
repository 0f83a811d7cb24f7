"""The advice's effective batch under a strategy whose GPUs do not each run a micro-batch (device_map:
``data_parallel: false`` in formulas/strategies/strategies.yaml): more GPUs do not multiply the batch, so
a batch change on more GPUs keeps the steps of one replica (docs/fit-advice.md, the effective batch)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from vramwise.answers.advice import advise
from unit.answers.advice_fakes import Settings as _Settings  # the fakes beside this file, by their folder


class _Split:
    """A run laid over ``k`` GPUs: ``400 // k`` bytes of states per GPU plus 10 per sample."""

    def __init__(self, settings):
        self.settings, self.strategy, self.blocking = settings, settings.strategy, ()
        self.total = 400 + 10 * settings.batch_size

    def min_per_gpu(self, k: int) -> int:
        return 400 // k + 10 * self.settings.batch_size


def _advice(strategy: str) -> dict:
    here = _Split(_Settings(strategy=strategy))
    profile = SimpleNamespace(name="fake", settings_read=frozenset({"batch_size"}), tables=(), methods=("full",))
    registry = SimpleNamespace(strategy_info=lambda name: {"offload": (), "profiles": ()})
    advice = advise(here, lambda c: _Split(replace(here.settings, batch_size=c.get("batch_size", 8))), gpus=2,
                    usable=100, share=0.0, profile=profile, registry=registry, max_batch_size=None, max_seq_len=None,
                    max_lora_rank=None, min_gpus=20, max_gpus=64, accumulation=1)
    return {a.kinds: a for a in advice}


def test_device_map_gpus_do_not_multiply_the_batch():
    # device_map on 2 GPUs at batch 8, 1 step: one replica, an effective batch of 8 x 1 x 1 = 8, on GPUs of
    # 100 bytes. Nothing fits on 2 GPUs (batch 1: 200 + 10). Batch 8 alone fits from 400 / k + 80 <= 100,
    # k >= 20: the machine count 24 (16 + 80 = 96). Batch 1 fits from k >= 5: on 8 GPUs the batch is relaxed
    # to the mildest that fits and keeps 8: batch 4 with 8 / (4 x 1) = 2 steps, 50 + 40 = 90 bytes.
    by_kinds = _advice("device_map")
    combo = by_kinds[("accumulation", "gpus")]
    assert dict(combo.changes) == {"batch_size": 4, "gradient_accumulation_steps": 2, "gpus": 8, "world_size": 8}
    assert combo.description == ("batch 4 with 2 gradient accumulation steps (the same effective batch of 8); "
                                 "8 GPUs instead of 2")
    assert combo.fits and combo.per_gpu == 400 // 8 + 10 * 4 == 90
    more = by_kinds[("gpus",)]
    assert more.gpus == 24 and more.fits and more.per_gpu == 400 // 24 + 80 == 96


@pytest.mark.parametrize("strategy", ["ddp", "zero2"])
def test_data_parallel_gpus_multiply_the_batch(strategy):
    # the same run under a data-parallel strategy: 8 x 1 x 2 = 16. On 8 GPUs batch 4 would need 16 / (4 x 8)
    # steps, no whole number; batch 2 needs 16 / (2 x 8) = 1 step and 50 + 20 = 70 bytes
    combo = _advice(strategy)[("accumulation", "gpus")]
    assert dict(combo.changes) == {"batch_size": 2, "gradient_accumulation_steps": 1, "gpus": 8, "world_size": 8}
    assert "(the same effective batch of 16)" in combo.description and combo.per_gpu == 70
