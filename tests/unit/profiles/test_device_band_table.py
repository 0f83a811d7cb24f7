"""The device bands (vramwise.profiles.bands: DeviceBand, DeviceBandTable, ErrorBands): a file's bands read and
checked with file:line:col and the JSON path, the lookup by profile x method, the line a person reads, and the
pair of bands every estimate carries (the device band as accuracy/device_bands.yaml holds it, read here with a
plain YAML reader)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import vramwise
from vramwise.errors import FileFormatError
from vramwise.profiles.bands import DeviceBand, ErrorBand, ErrorBands, read_device_bands

ROOT = Path(__file__).resolve().parents[3]
SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
BUNDLED = yaml.safe_load((ROOT / "accuracy" / "device_bands.yaml").read_text(encoding="utf-8"))

FILE = """\
schema_version: 1
statistics: [torch_max_reserved, nvidia_smi, total_reported]
bands:
  - profile: hf
    method: lora
    runs: 32
    median_abs_error: 0.086
    p90_abs_error: 0.156
    signed_median: 0.085
    p90_shortfall: 0.15
    frameworks: {hf: 24, fsdp-qlora: 8}
    statistics: {torch_max_reserved: 23, nvidia_smi: 6, total_reported: 3}
  - profile: hf
    method: qlora
    runs: 1
    median_abs_error: 0.2
    p90_abs_error: 0.2
    signed_median: -0.2
    p90_shortfall: 0.2
    frameworks: {hf: 1}
    statistics: {nvidia_smi: 1}
"""


def test_a_covered_band_and_its_line():
    t = read_device_bands(FILE, "x.yaml")
    b = t.band("hf", "lora")
    assert (b.covered, b.runs, b.median_abs_error, b.p90_abs_error, b.signed_median, b.p90_shortfall) == (
        True, 32, 0.086, 0.156, 0.085, 0.15)
    # one decimal: 0.086 -> "8.6 %", 0.156 -> "15.6 %", 0.085 signed -> "+8.5 %"
    assert b.line() == ("device total: median |error| 8.6 %, p90 15.6 % (signed median +8.5 %) over 32 published "
                        "GPU runs (hf, lora: hf 24, fsdp-qlora 8)")
    one = t.band("hf", "lora", load_in_4bit=True)  # LoRA on a 4-bit base is looked up as qlora
    assert one == t.band("hf", "qlora") and one.line().endswith("over 1 published GPU run (hf, qlora: hf 1)")
    d = b.to_dict()
    assert json.loads(json.dumps(d)) == d and d["summary"] == b.line()
    assert d["frameworks"] == {"hf": 24, "fsdp-qlora": 8} and d["statistics"]["nvidia_smi"] == 6


def test_what_no_run_covers_says_so():
    b = read_device_bands(FILE, "x.yaml").band("hf", "full")
    assert not b.covered and (b.runs, b.p90_abs_error, b.p90_shortfall, b.reason) == (0, None, None, None)
    assert b.line() == "device total: no published GPU run covers (hf, full); keep a margin"


def _line_of(text: str, needle: str, nth: int = 0) -> int:
    return [k for k, line in enumerate(text.splitlines(), 1) if needle in line][nth]


@pytest.mark.parametrize("change, message", [
    (lambda t: t.replace("method: qlora", "method: lora"),
     lambda t: f"x.yaml:{_line_of(t, '- profile: hf', 1)}:5: $.bands[1]: hf/lora is given twice"),
    (lambda t: t.replace("p90_abs_error: 0.156", "p90_abs_error: 0.05"),
     lambda t: f"x.yaml:{_line_of(t, 'p90_abs_error: 0.05')}:20: $.bands[0].p90_abs_error: below the median"),
    (lambda t: t.replace("{hf: 24, fsdp-qlora: 8}", "{hf: 24}"),
     lambda t: f"x.yaml:{_line_of(t, 'frameworks: {hf: 24}')}:17: $.bands[0].frameworks: counts 24 runs, not 32"),
    (lambda t: t.replace("p90_shortfall: 0.2\n", "p90_shortfall: 1.5\n"),
     lambda t: f"x.yaml:{_line_of(t, 'p90_shortfall: 1.5')}:20: $.bands[1].p90_shortfall: 1.5 is greater than the maximum of 1"),
])
def test_file_problems_name_file_line_and_column(change, message):
    text = change(FILE)
    with pytest.raises(FileFormatError) as e:
        read_device_bands(text, "x.yaml")
    (problem,) = e.value.problems
    assert problem.startswith(message(text)), problem


@pytest.mark.parametrize("profile, settings, key", [
    ("hf", {"method": "lora"}, ("hf", "lora")),
    ("hf", {"method": "lora", "load_in_4bit": True}, ("hf", "qlora")),
    ("hf", {"method": "full", "strategy": "fsdp", "world_size": 2}, ("hf", "full")),  # pooled over strategies
    ("torchtune", {"method": "lora"}, ("torchtune", "lora")),
    ("litgpt", {"method": "lora"}, ("litgpt", "lora")),
    ("unsloth", {"method": "inference"}, ("unsloth", "inference")),  # no published run measures inference
])
def test_an_estimate_carries_both_bands(profile, settings, key):
    e = vramwise.estimate(SMALL, profile=profile, **settings)
    bands = e.error_band
    assert isinstance(bands, ErrorBands) and isinstance(bands.tensors, ErrorBand) and isinstance(bands.device, DeviceBand)
    entry = [b for b in BUNDLED["bands"] if (b["profile"], b["method"]) == key]
    d = bands.device
    assert (d.profile, d.method) == key
    if entry:
        assert d.covered and (d.runs, d.p90_abs_error, d.p90_shortfall) == (
            entry[0]["runs"], entry[0]["p90_abs_error"], entry[0]["p90_shortfall"])
    else:
        assert not d.covered and d.line().startswith("device total: no published GPU run covers (")
    assert e.to_dict()["error_band"] == {"tensors": bands.tensors.to_dict(), "device": d.to_dict()}
    assert bands.lines() == (bands.tensors.line(), d.line())


def test_a_profile_from_another_formulas_folder_has_no_device_band(tmp_path):
    import shutil
    from importlib import resources

    forms = tmp_path / "formulas"
    shutil.copytree(resources.files("vramwise.formulas"), forms, ignore=shutil.ignore_patterns("__*"))
    b = vramwise.estimate(SMALL, profile="hf", method="lora", registry=vramwise.Registry(formulas_dir=forms)).error_band.device
    assert not b.covered and b.reason == f"the profile is read from {forms / 'hf' / 'profile.yaml'}, not the bundled formulas"
