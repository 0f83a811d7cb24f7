"""An estimate carries what a surface prints about it (its profile's summary and report lines, its
strategy's entry), so that no surface goes back to the registry by the profile's name; the report lines
are written by vramwise.surfaces.views, not by the estimate."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import vramwise
from vramwise.surfaces.views import report_lines

ROOT = Path(__file__).resolve().parents[3]
LLAMA = str(ROOT / "examples" / "llama-3.1-8b.json")


def _gib(n: float) -> str:
    return f"{n / 2**30:,.2f}"


def test_profile_data_is_the_profile_file_the_estimate_was_made_under():
    e = vramwise.estimate(LLAMA)
    manifest = yaml.safe_load((ROOT / "formulas" / "unsloth" / "profile.yaml").read_text())
    assert e.profile_data.summary == manifest["summary"]
    assert e.profile_data.further_gpu_share == manifest["selection"]["further_gpu_share"] == 0.85
    assert e.strategy_info is None
    for gone in ("report_lines", "further_gpu_share"):  # formatting and GPU selection live above the estimate
        assert not hasattr(e, gone)


def test_strategy_info_is_the_strategies_manifest_entry():
    e = vramwise.estimate(LLAMA, profile="hf", method="full", strategy="zero3", world_size=8)
    entry = yaml.safe_load((ROOT / "formulas" / "strategies" / "strategies.yaml").read_text())["strategies"]["zero3"]
    assert e.strategy_info["summary"] == entry["summary"] and e.strategy_info["host_note"] == entry["host_note"]


def test_report_lines_fill_the_profile_template():
    # formulas/unsloth/profile.yaml: for inference, "with a KV cache for batch {batch_size} x {seq_len} tokens:
    # cache {kv_cache} GiB, weights + cache + overhead {kv_cache_total} GiB", the figures in GiB (2**30 bytes)
    e = vramwise.estimate(LLAMA, method="inference", batch_size=2, seq_len=4096)
    f = e.figures
    assert report_lines(e, _gib) == [f"with a KV cache for batch 2 x 4096 tokens: cache {_gib(f['kv_cache'])} GiB, "
                                     f"weights + cache + overhead {_gib(f['kv_cache_total'])} GiB"]
    assert report_lines(vramwise.estimate(LLAMA, method="lora"), _gib) == []  # the line is for inference only


def _manifest(profile: str) -> dict:
    return yaml.safe_load((ROOT / "formulas" / profile / "profile.yaml").read_text())


def test_the_other_profile_pairs_are_profile_data():
    from vramwise.answers.profile_note import other_profile

    for name, other in (("unsloth", "hf"), ("hf", "unsloth")):
        m = _manifest(name)["other_profile"]
        assert vramwise.Registry.default().profile(name).other_profile == (m["profile"], m["ratio"]) == (other, 1.5)
    # the note's rule, from two independent estimates: given when the totals differ by more than 1.5x either way
    here, there = vramwise.estimate(LLAMA), vramwise.estimate(LLAMA, profile="hf")
    note = other_profile(here)
    ratio = there.total / here.total
    assert (note is not None) == (not 1 / 1.5 <= ratio <= 1.5)
    if note is not None:
        assert note.profile == "hf" and note.total == there.total and note.ratio == ratio
    assert other_profile(vramwise.estimate(LLAMA, profile="torchtune")) is None  # names no other profile


def test_why_a_component_is_absent_is_profile_data():
    reasons = {(a["component"], a.get("phase")): a["why"] for a in _manifest("hf")["absent"]}
    prof = vramwise.Registry.default().profile("hf")
    assert prof.absent_reason("gradients", "forward") == reasons[("gradients", "forward")]
    assert prof.absent_reason("lora", "backward") == reasons[("lora", None)]  # an entry without a phase: any phase
    assert prof.absent_reason("weights", "forward") is None


def test_an_absent_reason_for_a_phase_the_profile_lacks_names_its_place(tmp_path):
    import shutil

    from vramwise.errors import FileFormatError

    formulas = tmp_path / "formulas"
    shutil.copytree(ROOT / "formulas", formulas)
    path = formulas / "hf" / "profile.yaml"
    path.write_text(path.read_text().replace("    phase: forward\n", "    phase: warmup\n", 1))
    with pytest.raises(FileFormatError) as e:
        vramwise.Registry(formulas_dir=formulas, validate=True).profile("hf")
    assert "profile.yaml:" in str(e.value) and "$.absent[0].phase" in str(e.value) and "'warmup'" in str(e.value)


def test_the_gpu_side_profiles_say_what_is_not_pinned():
    # issue: "where a term cannot be pinned, the output says so": the reserve is fitted on fake steps through a model
    # of the allocator (hf's LoRA and QLoRA) or a flat share of the tensor peak (formulas/shared/constants.yaml), the
    # CUDA context a constant, neither measured on a GPU
    for profile in ("hf", "torchtune", "litgpt"):
        lines = report_lines(vramwise.estimate(LLAMA, profile=profile, method="lora"), _gib)
        assert any(line.startswith("not pinned on a GPU: the allocator's reserve") and "CUDA context" in line
                   for line in lines), profile
