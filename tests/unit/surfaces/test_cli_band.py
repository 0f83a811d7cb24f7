"""The error bands in the answers of `fit --json`, `compare` and `sweep` (text, CSV and JSON): two per
estimate, the tensor band of its profile x method x strategy as accuracy/bands.yaml holds it and the device
band of its profile x method as accuracy/device_bands.yaml holds it.

The expected figures are read from the two files themselves (the files the matrices' measurements and the
published runs' scores were written to), not from vramwise's lookup of them; the shape of a band is
Estimate.to_dict()'s."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

import vramwise
from vramwise.surfaces.cli.main import main

from test_cli import SMALL, cfg  # noqa: F401 - the small llama config and its fixture

ROOT = Path(__file__).resolve().parents[3]
FILE = yaml.safe_load((ROOT / "accuracy" / "bands.yaml").read_text(encoding="utf-8"))
DEVICE = yaml.safe_load((ROOT / "accuracy" / "device_bands.yaml").read_text(encoding="utf-8"))
#: the keys of a tensor band, as an estimate's to_dict() gives them
BAND_KEYS = set(vramwise.estimate(SMALL, profile="hf").to_dict()["error_band"]["tensors"])


def _run(args, capsys):
    assert main(args) == 0
    return capsys.readouterr().out


def _entry(profile, method, strategy="none", compile=False):
    """The file's band of the cell (of compiled steps when ``compile``), or None."""
    got = [b for b in FILE["bands"] if (b["profile"], b["method"], b["strategy"], b.get("compile", False))
           == (profile, method, strategy, compile)]
    assert len(got) <= 1
    return got[0] if got else None


def _unmeasured(kind, name):
    """The file's reason why a profile or a method is not measured, or None."""
    return next((u["reason"] for u in FILE["unmeasured"] if u.get(kind) == name), None)


def check(bands: dict, profile, method, strategy="none") -> None:
    """``bands`` (a JSON pair) are the files' for the cell: their figures, or not measured / covered."""
    assert set(bands) == {"tensors", "device"}
    check_device(bands["device"], profile, method)
    band = bands["tensors"]
    assert set(band) == BAND_KEYS
    assert (band["profile"], band["method"], band["strategy"]) == (profile, method, strategy)
    entry = _entry(profile, method, strategy)
    if entry is not None:
        assert band["measured"] and band["reason"] is None
        for key in ("cells", "median_abs_error", "max_abs_error", "world_sizes", "matrices", "commit"):
            assert band[key] == entry[key], key
        return
    assert not band["measured"] and band["cells"] == 0 and band["median_abs_error"] is None
    why = _unmeasured("method", method) or _unmeasured("profile", profile)
    if why is not None:
        assert band["reason"] == why
    assert band["summary"].startswith("tensors: not measured (")


def check_device(band: dict, profile, method) -> None:
    """``band`` is the device file's entry of (profile, method), or says that no published run covers it."""
    got = [b for b in DEVICE["bands"] if (b["profile"], b["method"]) == (profile, method)]
    assert (band["profile"], band["method"]) == (profile, method)
    if got:
        (entry,) = got
        assert band["covered"] and band["reason"] is None
        for key in ("runs", "median_abs_error", "p90_abs_error", "signed_median", "p90_shortfall", "frameworks"):
            assert band[key] == entry[key], key
        assert band["summary"].startswith("device total: median |error| ")
        assert f"over {entry['runs']} published GPU run" in band["summary"]
    else:
        assert not band["covered"] and band["runs"] == 0 and band["p90_shortfall"] is None
        assert band["summary"] == f"device total: no published GPU run covers ({profile}, {method}); keep a margin"


def _pct(x) -> str:
    return f"{100 * x:.2f}"


# -- fit ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, cell", [
    (["--profile", "hf", "--method", "lora"], ("hf", "lora", "none")),
    (["--profile", "hf", "--method", "lora", "--load-in-4bit", "true"], ("hf", "qlora", "none")),  # LoRA on 4-bit
    (["--profile", "hf", "--method", "full", "--strategy", "fsdp", "--gpus", "2"], ("hf", "full", "fsdp")),
    (["--profile", "torchtune", "--method", "qlora", "--strategy", "fsdp", "--gpus", "2"], ("torchtune", "qlora", "fsdp")),
    ([], ("unsloth", "qlora", "none")),  # the default profile and method: not measured
])
def test_fit_json_carries_the_band_of_its_settings(cfg, capsys, flags, cell):
    data = json.loads(_run(["fit", cfg, "--gpu", "24GiB", "--json", *flags], capsys))
    check(data["error_band"], *cell)


# -- compare --------------------------------------------------------------------------------------

def test_compare_json_has_a_band_per_column(cfg, capsys):
    data = json.loads(_run(["compare", cfg, "--profiles", "hf,torchtune,unsloth", "--methods", "qlora,lora,full,inference",
                            "--json"], capsys))
    cells = {(c["profile"], c["method"]): c for c in data["cells"]}
    assert len(cells) == 12
    for (profile, method), c in cells.items():
        if c["problem"] is not None:  # not estimated (hf and torchtune model no inference): no band either
            assert method == "inference" and c["error_band"] is None
            continue
        check(c["error_band"], profile, method)
    assert cells[("unsloth", "inference")]["error_band"]["tensors"]["reason"] == _unmeasured("method", "inference")


def test_compare_json_under_a_strategy(cfg, capsys):
    data = json.loads(_run(["compare", cfg, "--profiles", "hf,torchtune,litgpt", "--methods", "lora,full",
                            "--strategy", "fsdp", "--world-size", "2", "--json"], capsys))
    for c in data["cells"]:
        check(c["error_band"], c["profile"], c["method"], "fsdp")
    # litgpt's FSDP has no cell in the file: the band names the profiles that have one
    measured = sorted({b["profile"] for b in FILE["bands"] if b["strategy"] == "fsdp"})
    litgpt = [c["error_band"]["tensors"] for c in data["cells"] if c["profile"] == "litgpt"]
    assert measured and "litgpt" not in measured and len(litgpt) == 2
    assert all(not b["measured"] and all(p in b["reason"] for p in measured) for b in litgpt)


def test_compare_table_has_a_band_row_pair_and_a_line_per_column(cfg, capsys):
    out = _run(["compare", cfg, "--profiles", "hf,unsloth", "--methods", "qlora,full"], capsys)
    lines = out.splitlines()
    heads = next(x for x in lines if x.startswith("GiB")).split()[1:]
    assert heads == ["hf/qlora", "hf/full", "unsloth/qlora", "unsloth/full"]
    rows = {}
    for label, key in (("median |err|", "median_abs_error"), ("max |err|", "max_abs_error"), ("device p90", "p90")):
        row = next(x for x in lines if x.startswith(label))
        rows[key] = row[len(label):].split()
    for k, head in enumerate(heads):
        profile, method = head.split("/")
        entry = _entry(profile, method)
        for key in ("median_abs_error", "max_abs_error"):
            assert rows[key][k] == (f"{_pct(entry[key])}%" if entry else "—"), (head, key)  # a dash: not measured
        device = [b for b in DEVICE["bands"] if (b["profile"], b["method"]) == (profile, method)]
        assert rows["p90"][k] == (f"{_pct(device[0]['p90_abs_error'])}%" if device else "—"), head  # no run: a dash
    flat = " ".join(out.split())
    for method in ("qlora", "full"):
        entry = _entry("hf", method)
        assert (f"tensors: median |error| {_pct(entry['median_abs_error'])} %, largest {_pct(entry['max_abs_error'])} % "
                f"over {entry['cells']} CPU-measured cells (hf, {method}, one GPU)") in flat
        assert f"tensors: not measured (unsloth, {method}, one GPU): {_unmeasured('profile', 'unsloth')}" in flat
        device = [b for b in DEVICE["bands"] if (b["profile"], b["method"]) == ("hf", method)]
        if device:  # one decimal: 0.156269 -> "15.6 %"
            assert (f"device total: median |error| {100 * device[0]['median_abs_error']:.1f} %, "
                    f"p90 {100 * device[0]['p90_abs_error']:.1f} %") in flat


# -- sweep ----------------------------------------------------------------------------------------

SWEEP = ["--profile", "hf", "--method", "qlora,lora,full", "--seq-len", "256,512"]


def test_sweep_json_has_a_band_per_row(cfg, capsys):
    data = json.loads(_run(["sweep", cfg, *SWEEP, "--json"], capsys))
    assert len(data["rows"]) == 6
    for row in data["rows"]:
        check(row["error_band"], "hf", row["method"])


def test_sweep_csv_has_the_bands_errors(cfg, capsys):
    rows = list(csv.DictReader(io.StringIO(_run(["sweep", cfg, *SWEEP, "--format", "csv"], capsys))))
    assert len(rows) == 6
    for row in rows:
        entry = _entry("hf", row["method"])
        assert float(row["median_abs_error"]) == entry["median_abs_error"]
        assert float(row["max_abs_error"]) == entry["max_abs_error"]
    rows = list(csv.DictReader(io.StringIO(_run(["sweep", cfg, "--batch-size", "1,2", "--format", "csv"], capsys))))
    assert [(r["median_abs_error"], r["max_abs_error"]) for r in rows] == [("", "")] * 2  # unsloth: not measured


@pytest.mark.parametrize("axes", [SWEEP, ["--profile", "hf", "--method", "qlora,lora,full", "--seq-len", "256,512",
                                          "--batch-size", "1,2"]])
def test_sweep_table_has_a_line_per_band(cfg, capsys, axes):
    # two axes (a grid) and three (a row per point): a line for each method swept, after the totals
    out = _run(["sweep", cfg, *axes], capsys)
    tail = out[out.index("total GiB"):]
    bands = [x for x in tail.splitlines() if x.startswith("tensors: ")]
    assert len(bands) == 3
    assert len([x for x in tail.splitlines() if x.startswith("device total: ")]) == 3
    for method, line in zip(("qlora", "lora", "full"), bands):
        entry = _entry("hf", method)
        assert line.startswith(f"tensors: median |error| {_pct(entry['median_abs_error'])} %")
        assert f"(hf, {method}, one GPU)" in " ".join(tail.split())
