"""The advice's choices on a run whose needs are written by hand: which batch the accumulation entry takes
(the mildest divisor of the batch at or under the largest batch that fits) and how a combination is made
minimal and relaxed to its mildest variants (engine/answers/advice.py; docs/fit-advice.md). The estimates
are a formula of the settings, so every expected figure is a line of arithmetic."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from unit.answers.advice_fakes import Settings  # the fakes beside this file: FSDP, cross_entropy (no loss or strategy advice)
from vramwise.answers.advice import advise

USABLE = 100  # bytes each GPU may use: the needs below are small numbers of bytes


class Run:
    """An estimate whose per-GPU need (and total) is ``base + per_sample[checkpointing] x batch``, plus
    ``optimizer[name]`` when given."""

    def __init__(self, settings: Settings, base: int, per_sample: dict, optimizer: dict | None = None):
        self.settings, self._base, self._per, self._opt = settings, base, per_sample, optimizer
        self.strategy = None  # the placement rule without a strategy: one GPU holds the total
        self.blocking = ()  # no warning says the stack cannot run it
        self.total = base + per_sample[settings.gradient_checkpointing] * settings.batch_size \
            + (optimizer[settings.optimizer] if optimizer else 0)

    def min_per_gpu(self, k: int) -> int:
        return self.total


def _advise(here: Run, settings_read: set, max_batch: int | None, accumulation: int = 1):
    profile = SimpleNamespace(name="fake", settings_read=frozenset(settings_read), tables=(), methods=("full",))
    registry = SimpleNamespace(strategy_info=lambda name: {"offload": (), "profiles": ()})
    seen = []

    def estimate_at(changes):
        seen.append(dict(changes))
        known = {k: v for k, v in changes.items() if k in Settings.__dataclass_fields__}
        return Run(replace(here.settings, **known), here._base, here._per, here._opt)

    got = advise(here, estimate_at, gpus=1, usable=USABLE, share=0.0, profile=profile, registry=registry,
                 max_batch_size=max_batch, max_seq_len=None, max_lora_rank=None, min_gpus=None, max_gpus=1,
                 accumulation=accumulation)
    return got, seen


def test_accumulation_takes_the_mildest_divisor_under_the_largest_batch():
    # need = 70 + 6 x batch: batch 8 needs 118 > 100; the largest batch that fits is 5 (100), which does not
    # divide 8; the divisors of 8 below it are 4, 2, 1 and the mildest at or under 5 is 4: 4 x 2 steps, 94
    here = Run(Settings(batch_size=8), 70, {"none": 6})
    (a,), _ = _advise(here, {"batch_size"}, max_batch=5)
    assert a.kinds == ("accumulation",) and a.fits
    assert dict(a.changes) == {"batch_size": 4, "gradient_accumulation_steps": 2}
    assert a.description == "batch 4 with 2 gradient accumulation steps (the same effective batch of 8)"
    assert a.per_gpu == a.total == 70 + 6 * 4 == 94


def test_accumulation_keeps_the_effective_batch_of_the_current_steps():
    # batch 12 with 2 steps already (effective 24); need = 40 + 20 x batch: the largest batch that fits is 3
    # (100); divisors of 12 below 12: 6, 4, 3, 2, 1 -> 3, with 2 x 12 / 3 = 8 steps; 40 + 60 = 100
    here = Run(Settings(batch_size=12), 40, {"none": 20})
    (a,), _ = _advise(here, {"batch_size"}, max_batch=3, accumulation=2)
    assert dict(a.changes) == {"batch_size": 3, "gradient_accumulation_steps": 8}
    assert a.description == "batch 3 with 8 gradient accumulation steps (the same effective batch of 24)"
    assert a.fits and a.per_gpu == 100


def test_accumulation_without_a_fitting_batch_is_the_strongest_and_does_not_fit():
    # need = 120 + batch: even batch 1 needs 121 > 100 (fit found no largest batch): 1 x 8, not fitting
    here = Run(Settings(batch_size=8), 120, {"none": 1})
    (a,), _ = _advise(here, {"batch_size"}, max_batch=None)
    assert dict(a.changes) == {"batch_size": 1, "gradient_accumulation_steps": 8}
    assert not a.fits and a.per_gpu == 121


def test_a_combination_is_minimal_and_relaxed_to_its_mildest_variants():
    # need = 95 + per_sample x batch, per sample 10 without checkpointing, 2 with "true", 1 with "unsloth".
    # Alone: batch 1 without checkpointing needs 105; "true" at batch 8 111, "unsloth" 103: none fits.
    # Greedy, strongest variants cheapest first: batch 1 and unsloth, 96, fits. Minimal: without checkpointing
    # 105, without accumulation 103: both stay. Relaxed in order: the batch first, with unsloth: 4 -> 99 fits
    # (the mildest divisor); then checkpointing at batch 4: "true" 103 does not fit, so unsloth stays.
    here = Run(Settings(batch_size=8), 95, {"none": 10, "true": 2, "unsloth": 1})
    advice, _ = _advise(here, {"batch_size", "gradient_checkpointing"}, max_batch=None)
    fitting = [a for a in advice if a.fits]
    assert len(fitting) == 1
    (combo,) = fitting
    assert combo.kinds == ("accumulation", "checkpointing") and combo.cost == 1 + 2
    assert dict(combo.changes) == {"batch_size": 4, "gradient_accumulation_steps": 2,
                                   "gradient_checkpointing": "unsloth"}
    assert combo.per_gpu == 95 + 1 * 4 == 99
    assert combo.description == ("batch 4 with 2 gradient accumulation steps (the same effective batch of 8); "
                                 "gradient checkpointing unsloth")
    assert advice[0] is combo  # fitting first
    singles = {a.kinds: a for a in advice if not a.fits}
    assert dict(singles[("accumulation",)].changes)["batch_size"] == 1 and singles[("accumulation",)].per_gpu == 105
    assert dict(singles[("checkpointing",)].changes) == {"gradient_checkpointing": "unsloth"}
    assert singles[("checkpointing",)].per_gpu == 103


def test_relaxation_reaches_the_second_kind_too():
    # base 91, per sample 10 / 3 ("true") / 1 ("unsloth"), batch 16. Alone: batch 1 without checkpointing 101,
    # "true" at 16 139, unsloth 107: none fits. Greedy: batch 1 + unsloth = 92 fits; minimal keeps both.
    # Relax the batch (divisors of 16 below it: 8, 4, 2, 1) with unsloth: 8 -> 99 fits. Relax checkpointing
    # at batch 8: "true" -> 91 + 24 = 115 does not fit; unsloth stays.
    here = Run(Settings(batch_size=16), 91, {"none": 10, "true": 3, "unsloth": 1})
    advice, _ = _advise(here, {"batch_size", "gradient_checkpointing"}, max_batch=None)
    (combo,) = [a for a in advice if a.fits]
    assert dict(combo.changes) == {"batch_size": 8, "gradient_accumulation_steps": 2,
                                   "gradient_checkpointing": "unsloth"}
    assert combo.per_gpu == 99
    # base 82, per sample 20 / 3 ("true") / 2 ("unsloth"), batch 12. Alone: batch 1 without checkpointing 102,
    # "true" at 12 118, unsloth 106: none fits. Greedy: batch 1 + unsloth = 84 fits; minimal keeps both.
    # Relax the batch (divisors of 12 below it: 6, 4, 3, 2, 1) with unsloth: 6 -> 82 + 12 = 94 fits. Relax
    # checkpointing at batch 6: "true" -> 82 + 18 = 100 fits: the mildest variant of each kind that still fits
    here = Run(Settings(batch_size=12), 82, {"none": 20, "true": 3, "unsloth": 2})
    advice, _ = _advise(here, {"batch_size", "gradient_checkpointing"}, max_batch=None)
    (combo,) = [a for a in advice if a.fits]
    assert dict(combo.changes) == {"batch_size": 6, "gradient_accumulation_steps": 2,
                                   "gradient_checkpointing": "true"}
    assert combo.per_gpu == 82 + 3 * 6 == 100


def test_a_kind_the_combination_does_not_need_is_dropped():
    # base 75; per sample 20 without checkpointing, 5 with it ("unsloth" no smaller: not offered); optimizer
    # states 30 (adamw_torch), 10 (adamw_8bit; paged no smaller: not offered); batch 2.
    # Alone: batch 1 125, checkpointing 115, 8-bit optimizer 125: none fits. Greedy, cheapest first: batch 1
    # + checkpointing 110, then + 8-bit optimizer 90: fits. Minimal, the most expensive kind first: without
    # the optimizer 110 (kept), without checkpointing 105 (kept), without the batch change 75 + 10 + 10 = 95:
    # fits, so accumulation goes: checkpointing and the 8-bit optimizer, cost 2 + 3
    here = Run(Settings(batch_size=2), 75, {"none": 20, "true": 5, "unsloth": 5},
               {"adamw_torch": 30, "adamw_8bit": 10, "paged_adamw_8bit": 10})
    advice, _ = _advise(here, {"batch_size", "gradient_checkpointing", "optimizer"}, max_batch=None)
    (combo,) = [a for a in advice if a.fits]
    assert combo.kinds == ("checkpointing", "optimizer") and combo.cost == 5
    assert dict(combo.changes) == {"gradient_checkpointing": "true", "optimizer": "adamw_8bit"}
    assert combo.per_gpu == 95
    assert sorted((a.kinds, a.per_gpu) for a in advice if not a.fits) == [
        (("accumulation",), 125), (("checkpointing",), 115), (("optimizer",), 125)]


@pytest.mark.parametrize("setting, current, tried", [
    # docs/fit-advice.md: checkpointing `true`, then `unsloth`; a `chunked`, then a `fused` loss (formulas/settings.yaml
    # saves_memory_in_order). After a value that saves nothing (none, standard) both are tried, mildest first; after
    # the milder one the stronger; nothing after the strongest, nor after a value that is no loss mode
    ("gradient_checkpointing", "none", ["true", "unsloth"]),
    ("gradient_checkpointing", "true", ["unsloth"]),
    ("gradient_checkpointing", "unsloth", []),
    ("loss", "standard", ["chunked", "fused"]),
    ("loss", "chunked", ["fused"]),
    ("loss", "fused", []),
    ("loss", "cross_entropy", []),
])
def test_the_modes_that_save_memory_are_tried_mildest_first_after_the_current_one(setting, current, tried):
    # need 200 > 100 whatever the mode (per sample 0 each, batch 1: no accumulation), so every variant is
    # estimated and none is kept: the estimates asked for are the variants tried, in order
    here = Run(replace(Settings(batch_size=1), **{setting: current}), 200, {"none": 0, "true": 0, "unsloth": 0})
    _, seen = _advise(here, {setting}, None)
    assert list(dict.fromkeys(c[setting] for c in seen if setting in c)) == tried
