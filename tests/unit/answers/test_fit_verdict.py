"""fit's verdict (fits / tight / does not fit, with the margin in GiB) and its default headroom, the p90
shortfall of the estimate's device band.

The total is the estimate's own (``vramwise.estimate``, not fit's answer) and the band's figure is read from
accuracy/device_bands.yaml with a plain YAML reader; the GPU sizes are chosen around them by hand, the margin
arithmetic is written out beside each case.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

import vramwise
from vramwise.answers.fit import VERDICTS, fit

GIB = 2**30
ROOT = Path(__file__).resolve().parents[3]
LLAMA = "meta-llama/Llama-3.1-8B"  # a catalog entry: no hub
SETTINGS = dict(profile="hf", method="lora", batch_size=1, seq_len=1024)
DEVICE = {(b["profile"], b["method"]): b for b in
          yaml.safe_load((ROOT / "accuracy" / "device_bands.yaml").read_text(encoding="utf-8"))["bands"]}


@pytest.fixture(scope="module")
def total() -> int:
    est = vramwise.estimate(LLAMA, **SETTINGS)
    assert est.strategy is None and est.min_per_gpu(1) == est.total  # one GPU: the per-GPU need is the total
    return est.total


@pytest.fixture(scope="module")
def p90() -> float:
    return DEVICE[("hf", "lora")]["p90_shortfall"]


def test_fits_when_the_total_leaves_the_bands_headroom(total, p90):
    # usable = int(M x (1 - p90)); M = ceil(T / (1 - p90)) + 64 bytes gives usable >= T: fits
    memory = math.ceil(total / (1 - p90)) + 64
    f = fit(LLAMA, gpu=memory, seq_lens=(), **SETTINGS)
    assert f.headroom == p90 and f.usable_bytes == int(memory * (1 - p90)) and f.fits
    v = f.verdict
    assert (v.label, v.headroom_source, v.margin_bytes) == ("fits", "device band", memory - total)
    d = f.to_dict()["verdict"]
    # margin in GiB: (M - T) / 2**30, two decimals
    assert d["label"] == "fits" and d["margin_gib"] == round((memory - total) / GIB, 2)
    assert d["headroom"] == p90 and d["headroom_bytes"] == int(memory * p90)
    runs = DEVICE[("hf", "lora")]["runs"]
    assert f"the device band's p90 shortfall over {runs} published GPU runs of hf, lora" in d["summary"]
    assert not f.advice  # nothing to change
    # the largest sequence and batch are answered at the same margin: they fit usable, one more does not
    usable, s, b = f.usable_bytes, f.max_seq_len, f.max_batch_size
    assert vramwise.estimate(LLAMA, **{**SETTINGS, "seq_len": s}).total <= usable
    assert vramwise.estimate(LLAMA, **{**SETTINGS, "seq_len": s + 1}).total > usable
    assert vramwise.estimate(LLAMA, **{**SETTINGS, "batch_size": b}).total <= usable
    assert vramwise.estimate(LLAMA, **{**SETTINGS, "batch_size": b + 1}).total > usable


def test_tight_when_the_gpu_holds_the_total_but_not_the_headroom(total, p90):
    # M = T + 1 GiB: the total fits with 1 GiB left, and 1 GiB < p90 x M (p90 x ~21 GiB is over 3 GiB)
    memory = total + GIB
    assert GIB < p90 * memory
    f = fit(LLAMA, gpu=memory, seq_lens=(), **SETTINGS)
    assert not f.fits and f.verdict.label == "tight"
    assert f.verdict.margin_bytes == GIB and f.to_dict()["verdict"]["margin_gib"] == 1.0
    assert f.verdict.line().startswith(f"tight, 1.00 GiB left of {memory / GIB:.2f} GiB per GPU, less than the "
                                       f"{int(memory * p90) / GIB:.2f} GiB headroom (headroom ")
    # the advice is answered at the headroom: every change that fits leaves it free, none lands in tight
    usable = int(memory * (1 - p90))
    fitting = [a for a in f.advice if a.fits]
    assert fitting and all(a.per_gpu <= usable for a in fitting)


def test_does_not_fit_when_the_gpu_does_not_hold_the_total(total):
    # M = T - 1 GiB: short by exactly 1 GiB
    memory = total - GIB
    f = fit(LLAMA, gpu=memory, seq_lens=(), **SETTINGS)
    v = f.verdict
    assert (v.label, v.margin_bytes) == ("does not fit", -GIB) and f.to_dict()["verdict"]["margin_gib"] == -1.0
    assert v.head() == f"does not fit, 1.00 GiB short of {memory / GIB:.2f} GiB per GPU"


def test_a_headroom_given_wins_zero_included(total, p90):
    memory = total + GIB  # tight at the band's headroom (above)
    zero = fit(LLAMA, gpu=memory, headroom=0, seq_lens=(), **SETTINGS)
    assert zero.headroom == 0 and zero.usable_bytes == memory and zero.fits
    assert (zero.verdict.label, zero.verdict.headroom_source) == ("fits", "given")
    # the words say it is below the band's p90 shortfall
    assert zero.verdict.headroom_why == (f"headroom 0 % given, below the device band's p90 shortfall of "
                                         f"{100 * p90:.1f} % over {DEVICE[('hf', 'lora')]['runs']} published GPU runs")
    # a headroom above the band's: 50 % of T + 1 GiB is less than T, so the total does not fit usable: tight
    half = fit(LLAMA, gpu=memory, headroom=0.5, seq_lens=(), **SETTINGS)
    assert half.usable_bytes == int(memory * 0.5) < total and half.verdict.label == "tight"
    assert half.verdict.headroom_why == "headroom 50 % given"


def test_no_default_verdict_says_fits_inside_the_band(total, p90):
    # GPU sizes from 0.9 T to 1.5 T: a "fits" always leaves the band's p90 shortfall of the GPU free,
    # a "tight" always holds the total, a "does not fit" never does
    for k in range(0, 61, 3):
        memory = int(total * (0.9 + k / 100))
        v = fit(LLAMA, gpu=memory, seq_lens=(), **SETTINGS).verdict
        assert v.label in VERDICTS
        if v.label == "fits":
            assert total <= memory * (1 - p90)
        elif v.label == "tight":
            assert memory * (1 - p90) < total <= memory
        else:
            assert total > memory


def test_without_a_published_run_no_headroom_is_kept_and_the_line_says_so():
    assert ("litgpt", "lora") not in DEVICE  # the corpus's LitGPT runs report allocated peaks only
    settings = dict(profile="litgpt", method="lora", batch_size=1, seq_len=1024)
    total = vramwise.estimate(LLAMA, **settings).total
    f = fit(LLAMA, gpu=total + GIB, seq_lens=(), **settings)
    assert f.headroom == 0 and f.usable_bytes == total + GIB and f.verdict.label == "fits"
    assert f.verdict.headroom_source == "none"
    assert f.verdict.headroom_why == ("headroom 0 %: no published GPU run covers litgpt, lora; give a headroom to "
                                      "keep a margin")
    assert f.to_dict()["error_band"]["device"]["covered"] is False


def test_compare_gives_each_column_the_same_verdict(total, p90):
    # the hf/lora column on a GPU of T + 1 GiB: tight, as fit says; the hf/qlora column needs less (4-bit weights)
    memory = total + GIB
    c = vramwise.compare(LLAMA, methods=("lora",), profiles=("hf",), gpu=memory, batch_size=1, seq_len=1024)
    ((_, _, est, _, fits),) = c.cells
    assert est.total == total and c.verdicts == ("tight",) and fits is False
    assert c.to_dict()["cells"][0]["verdict"] == "tight"
    assert fit(LLAMA, gpu=memory, seq_lens=(), **SETTINGS).verdict.label == "tight"
    roomy = vramwise.compare(LLAMA, methods=("lora",), profiles=("hf",), gpu=math.ceil(total / (1 - p90)) + 64,
                             batch_size=1, seq_len=1024)
    assert roomy.verdicts == ("fits",) and roomy.cells[0][4] is True
