"""`vramwise fit` shows its verdict with the margin, the headroom it kept and why, and both error bands; `--json`
carries the verdict as ``verdict``. The total is the estimate's and the band's figure is read from
accuracy/device_bands.yaml with a plain YAML reader; the GPU sizes are chosen around them by hand."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

import vramwise
from vramwise.surfaces.cli.main import main

GIB = 2**30
ROOT = Path(__file__).resolve().parents[3]
LLAMA = "meta-llama/Llama-3.1-8B"  # a catalog entry: no hub
FLAGS = ["--profile", "hf", "--method", "lora", "--batch-size", "1", "--seq-len", "1024"]
BAND = next(b for b in yaml.safe_load((ROOT / "accuracy" / "device_bands.yaml").read_text(encoding="utf-8"))["bands"]
            if (b["profile"], b["method"]) == ("hf", "lora"))


def _total() -> int:
    return vramwise.estimate(LLAMA, profile="hf", method="lora", batch_size=1, seq_len=1024).total


def _run(args, capsys) -> str:
    assert main(args) == 0
    return capsys.readouterr().out


def test_the_table_says_tight_with_the_bands_headroom(capsys):
    memory = _total() + GIB  # the GPU holds the total with 1 GiB left, less than the band's headroom
    out = " ".join(_run(["fit", LLAMA, "--gpu", f"{memory}B", *FLAGS], capsys).split())
    # 0.156269 -> "15.6 %" (one decimal), "15.6%" (three significant figures) in the usable line
    p = 100 * BAND["p90_shortfall"]
    assert f"the memory less {p:.3g}% headroom" in out
    assert f"headroom {p:.1f} %: the device band's p90 shortfall over {BAND['runs']} published GPU runs of hf, lora" in out
    assert f": tight, 1.00 GiB left of {memory / GIB:.2f} GiB per GPU, less than the" in out
    assert "tensors: median |error| " in out and "CPU-measured cells (hf, lora, one GPU)" in out
    assert (f"device total: median |error| {100 * BAND['median_abs_error']:.1f} %, p90 {100 * BAND['p90_abs_error']:.1f} %"
            in out)
    assert "advice: what to change so it fits" in out  # tight: the advice is answered at the headroom


def test_a_headroom_given_wins_and_json_carries_the_verdict(capsys):
    memory = _total() + GIB
    data = json.loads(_run(["fit", LLAMA, "--gpu", f"{memory}B", "--headroom", "0", "--json", *FLAGS], capsys))
    v = data["verdict"]
    # headroom 0: usable = M, the total fits with exactly 1 GiB to spare
    assert data["headroom"] == 0 and data["usable_bytes"] == memory and data["fits"]
    assert (v["label"], v["margin_gib"], v["margin_bytes"], v["headroom_source"]) == ("fits", 1.0, GIB, "given")
    assert v["summary"].startswith(f"fits, 1.00 GiB left of {memory / GIB:.2f} GiB per GPU (headroom 0 % given, "
                                   "below the device band's p90 shortfall")
    assert set(data["error_band"]) == {"tensors", "device"} and data["error_band"]["device"]["runs"] == BAND["runs"]


def test_does_not_fit_says_by_how_much(capsys):
    memory = _total() - GIB
    out = " ".join(_run(["fit", LLAMA, "--gpu", f"{memory}B", *FLAGS], capsys).split())  # wrapped at 100 columns
    assert f": does not fit, 1.00 GiB short of {memory / GIB:.2f} GiB per GPU tensors: " in out
