"""The answer commands (fit, compare, sweep) and the clarity of every output (issue 11)."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest

import vramwise
from vramwise.surfaces.cli.explain import installed
from vramwise.surfaces.cli.main import main

LLAMA = str(Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")
from test_cli import SMALL, cfg  # noqa: F401 - the same small config and its fixture


def _run(args, capsys):
    rc = main(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _gib(n) -> str:
    return f"{n / 2**30:,.2f}"


# -- fit ------------------------------------------------------------------------------------

def test_fit_table(capsys):
    rc, out, err = _run(["fit", LLAMA, "--gpu", "RTX 4090"], capsys)
    assert rc == 0 and err == ""
    f = vramwise.fit(LLAMA, gpu="RTX 4090")
    assert "GPU: NVIDIA GeForce RTX 4090" in out and "memory figure: the total nvidia-smi reports" in out
    assert f"usable per GPU: {_gib(f.usable_bytes)} GiB" in out
    assert f"largest batch size at seq 2,048: {f.max_batch_size:,}" in out
    assert f"largest sequence length at batch 4: {f.max_seq_len:,}" in out
    assert f"largest LoRA rank: {f.max_lora_rank:,}" in out
    assert "fewest GPUs: 1 x" in out
    for m in f.methods:
        assert any(line.startswith(m.method) and _gib(m.total) in line for line in out.splitlines())
    assert "frontier:" in out and f"{f.frontier[0][1]:,}" in out and "none fits" in out
    assert "None" not in out


def test_fit_json_equals_api(capsys):
    args = ["fit", LLAMA, "--gpu", "24GiB", "--method", "lora", "--gpus", "2", "--headroom", "10%",
            "--seq-lens", "1024,4096", "--json"]
    rc, out, _ = _run(args, capsys)
    assert rc == 0
    f = vramwise.fit(LLAMA, gpu="24GiB", method="lora", gpus=2, headroom=0.1, seq_lens=[1024, 4096])
    assert json.loads(out) == f.to_dict()


def test_fit_spells_out_the_selection_rule(capsys):
    rc, out, _ = _run(["fit", LLAMA, "--gpu", "24GiB", "--method", "full"], capsys)
    f = vramwise.fit(LLAMA, gpu="24GiB", method="full")
    assert rc == 0 and f.min_gpus > 1
    text = " ".join(out.split())
    assert f"fewest GPUs: {f.min_gpus} x" in text and "the first GPU in full plus 85% of each further one" in text
    assert "largest LoRA rank:" in out and "full trains no adapters" in out
    assert "does not fit" in out


def test_fit_size_only_and_ambiguous_gpu(capsys):
    rc, out, _ = _run(["fit", "--params", "8B", "--gpu", "H100"], capsys)
    assert rc == 0 and "a model of 8.00 B parameters (no config)" in out
    assert "h100-sxm" in out and "None" not in out


@pytest.mark.parametrize("args,needle,lines", [
    (["fit", "{cfg}"], "the following arguments are required: --gpu", 2),
    (["fit", "{cfg}", "--gpu", "nosuch"], "unknown GPU 'nosuch'", 1),
    (["fit", "{cfg}", "--gpu", "24"], "ambiguous", 1),
    (["fit", "{cfg}", "--gpu", "24GiB", "--headroom", "95%"], "--headroom", 2),
    (["fit", "{cfg}", "--gpu", "24GiB", "--seq-lens", "1,x"], "--seq-lens", 2),
    (["fit", "{cfg}", "--gpu", "24GiB", "--gpus", "0"], "--gpus", 2),
    (["compare", "{cfg}", "--gpus", "2"], "--gpus needs --gpu", 2),
    (["compare", "{cfg}", "--methods", "qlora,dora"], "unknown method 'dora'", 1),
    (["sweep", "{cfg}", "--batch-size", "1,x"], "--batch-size", 2),
    (["sweep", "{cfg}", "--seq-len", "0,2"], "--seq-len", 2),
    (["sweep", "{cfg}", "--method", "qlora,dora"], "unknown method 'dora'", 1),
    (["estimate", "{cfg}", "--plot", "x.pdf"], ".png or .svg", 2),
])
def test_errors_are_one_line(cfg, capsys, args, needle, lines):
    rc, out, err = _run([a.replace("{cfg}", cfg) for a in args], capsys)
    assert rc == 2 and out == ""
    assert err.startswith("vramwise: error: ") and needle in err and "Traceback" not in err
    assert len(err.splitlines()) == lines
    if lines == 2:
        assert err.splitlines()[1].endswith("--help' for usage")


# -- compare --------------------------------------------------------------------------------

def test_compare_table_and_json(capsys):
    rc, out, _ = _run(["compare", LLAMA, "--profiles", "unsloth,hf", "--gpu", "RTX 4090"], capsys)
    assert rc == 0
    c = vramwise.compare(LLAMA, profiles=["unsloth", "hf"], gpu="RTX 4090")
    lines = out.splitlines()
    head = next(line for line in lines if line.startswith("GiB"))
    assert head.split()[1:] == [f"{p}/{m}" for p, m, *_ in c.cells]
    total = next(line for line in lines if line.startswith("total"))
    assert total.split()[1:] == [_gib(e.total) for _, _, e, _, _ in c.cells]
    fits = next(line for line in lines if line.startswith("fits"))
    words = {"fits": "yes", "tight": "tight", "does not fit": "no"}  # fits: with the device band's headroom free
    assert fits.split()[-6:] == [words[v] for v in c.verdicts]
    assert [f for *_, f in c.cells] == [v == "fits" for v in c.verdicts]
    assert "profile hf: plain transformers" in out
    rc, out, _ = _run(["compare", LLAMA, "--profiles", "unsloth,hf", "--gpu", "RTX 4090", "--json"], capsys)
    assert json.loads(out) == c.to_dict()


def test_compare_marks_what_a_profile_does_not_model(cfg, capsys):
    rc, out, _ = _run(["compare", cfg, "--methods", "lora,inference", "--profiles", "hf"], capsys)
    assert rc == 0 and "hf/inference: profile hf does not model inference" in " ".join(out.split())
    assert "None" not in out


# -- sweep ----------------------------------------------------------------------------------

def test_sweep_two_axes_is_a_grid(cfg, capsys):
    rc, out, _ = _run(["sweep", cfg, "--batch-size", "1,2,4", "--seq-len", "512,2048"], capsys)
    assert rc == 0
    sw = vramwise.sweep(SMALL, batch_size=[1, 2, 4], seq_len=[512, 2048])
    lines = out.splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("batch_size \\ seq_len"))
    assert lines[k].split()[-2:] == ["512", "2048"]
    totals = {vals: e.total for vals, e in sw.rows}
    for row, b in zip(lines[k + 1:k + 4], (1, 2, 4)):
        assert row.split() == [str(b), _gib(totals[(b, 512)]), _gib(totals[(b, 2048)])]


def test_sweep_formats(cfg, capsys):
    args = ["sweep", cfg, "--method", "qlora,lora", "--lora-rank", "8,16", "--seq-len", "256,1024"]
    # axes in the order of vramwise.SETTINGS, whatever the order of the flags
    sw = vramwise.sweep(SMALL, method=["qlora", "lora"], seq_len=[256, 1024], lora_rank=[8, 16])
    rc, out, _ = _run(args + ["--format", "json"], capsys)
    assert rc == 0 and json.loads(out) == sw.to_dict()
    rc, out2, _ = _run(args + ["--json"], capsys)
    assert out2 == out
    rc, out, _ = _run(args + ["--format", "csv"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 8 and [int(r["total"]) for r in rows] == [e.total for _, e in sw.rows]
    rc, out, _ = _run(args, capsys)  # three axes: one row per point
    assert rc == 0 and "method  seq_len  lora_rank" in out and len([x for x in out.splitlines() if x.startswith(("qlora", "lora"))]) == 8


# -- help -----------------------------------------------------------------------------------

@pytest.mark.parametrize("cmd", ["estimate", "explain", "fit", "compare", "sweep", "select", "measure"])
def test_help_has_an_example(cmd, capsys):
    rc, out, _ = _run([cmd, "--help"], capsys)
    assert rc == 0 and "example:" in out and f"vramwise {cmd} " in out.split("example:")[1]


# -- clarity --------------------------------------------------------------------------------

def test_summary_and_other_profile_note(capsys):
    rc, out, _ = _run(["estimate", LLAMA], capsys)
    reg = vramwise.Registry.default()
    assert f"profile unsloth: {reg.profile('unsloth').summary}" in " ".join(out.split())
    hf = vramwise.estimate(LLAMA, profile="hf")
    text = " ".join(out.split())
    assert f"note: profile hf" in text and f"gives {_gib(hf.total)} GiB at the same settings" in text
    # the other way round, and not where the other profile does not model the method
    rc, out, _ = _run(["estimate", LLAMA, "--profile", "hf"], capsys)
    assert "note: profile unsloth" in out
    rc, out, _ = _run(["estimate", LLAMA, "--method", "inference"], capsys)
    assert "note: profile" not in out
    rc, out, _ = _run(["explain", LLAMA], capsys)
    assert out.splitlines()[1].startswith("profile unsloth: ") and "note: profile hf" in out


def test_no_note_when_profiles_agree(cfg, capsys, monkeypatch):
    import dataclasses

    from vramwise.estimation.estimate import Estimate

    # the profile's ratio (formulas/unsloth/profile.yaml other_profile.ratio) raised past any pair of totals
    data = Estimate.profile_data.fget
    monkeypatch.setattr(Estimate, "profile_data", property(
        lambda e: dataclasses.replace(data(e), other_profile=(data(e).other_profile[0], 1e9))))
    rc, out, _ = _run(["estimate", LLAMA], capsys)
    assert rc == 0 and "note:" not in out


def test_hf_peak_line_explains_absent_components(capsys):
    rc, out, _ = _run(["estimate", LLAMA, "--profile", "hf", "--method", "full", "--optimizer", "adamw_torch"], capsys)
    e = vramwise.estimate(LLAMA, profile="hf", method="full", optimizer="adamw_torch")
    text = " ".join(out.split())
    assert f"the table is what is alive at the peak, in the {e.peak_phase} phase" in text
    assert "lora 0: no adapters for this method" in text
    rc, out, _ = _run(["estimate", LLAMA, "--profile", "hf", "--method", "lora", "--batch-size", "8"], capsys)
    e = vramwise.estimate(LLAMA, profile="hf", method="lora", batch_size=8)
    text = " ".join(out.split())
    if e.gradients == 0 and e.peak_phase in ("backward", "forward"):
        assert "gradients 0:" in text
    assert f"in the {e.peak_phase} phase" in text


def test_inference_prints_one_total_and_a_per_gpu_with_the_cache(capsys):
    rc, out, _ = _run(["estimate", LLAMA, "--method", "inference", "--gpus", "1,2,4"], capsys)
    e = vramwise.estimate(LLAMA, method="inference")
    kv, total = e.figures["kv_cache"], e.figures["kv_cache_total"]
    overhead = total - e.weights - kv
    totals = [line for line in out.splitlines() if line.startswith("total")]
    assert len(totals) == 1 and _gib(total) in totals[0]
    assert f"reference: the unsloth inference rule" in out and _gib(e.total) in out
    per = {n: math.ceil((e.weights + kv) / n) + overhead for n in (1, 2, 4)}
    assert per[1] == total
    line = next(x for x in out.splitlines() if x.startswith("minimum per GPU"))
    assert "KV cache split over the GPUs" in line
    assert all(f"{n} x {_gib(v)} GiB" in line for n, v in per.items())
    rc, out, _ = _run(["estimate", LLAMA, "--method", "inference", "--gpus", "1,2", "--json"], capsys)
    data = json.loads(out)
    assert {k: data[k] for k in e.to_dict()} == e.to_dict()
    assert data["min_per_gpu"] == {"1": per[1], "2": per[2]} and data["inference_total"] == total
    assert data["inference_overhead"] == overhead  # the page draws it; it computes nothing itself
    assert data["min_per_gpu_rule"] == {"1": e.min_per_gpu(1), "2": e.min_per_gpu(2)}


@pytest.mark.parametrize("method,absent,present", [
    ("full", ["rank "], ["checkpointing", "adamw_8bit"]),
    ("inference", ["rank ", "adamw_8bit", "checkpointing"], ["16-bit weights"]),
    ("qlora", [], ["rank 16", "checkpointing unsloth", "adamw_8bit"]),
])
def test_settings_line_lists_what_applies(cfg, capsys, method, absent, present):
    rc, out, _ = _run(["estimate", cfg, "--method", method], capsys)
    line = out.splitlines()[1]
    assert line.startswith("family llama") and all(a not in line for a in absent) and all(p in line for p in present)


def test_explain_hides_what_does_not_apply(cfg, capsys):
    rc, out, _ = _run(["explain", cfg], capsys)
    assert rc == 0
    assert "kv_cache_bytes  formulas" not in out and "hidden:" in out and "--all shows everything" in out
    assert " bytes (" in out and " GiB)" in out
    sections = [line for line in out.splitlines() if line.startswith("[")]
    assert len(sections) == len(set(sections))
    # wrapped to 100 columns, but for the lines that name a (long, temporary) path
    assert all(len(line) <= 100 for line in out.splitlines() if "  ->  " not in line and cfg not in line)
    assert not re.search(r"=\s?None\b", out)  # unset values read "unset" (expressions may still say `is None`)
    rc, out_all, _ = _run(["explain", cfg, "--all"], capsys)
    assert "kv_cache_bytes  formulas/unsloth/inference.yaml" in out_all and "hidden:" not in out_all
    rc, out, _ = _run(["explain", cfg, "--method", "inference"], capsys)
    assert "kv_cache_bytes  formulas/unsloth/inference.yaml" in out and "unsloth_double_quant" in out.split("hidden:")[1]


def test_explain_shows_gib_and_installed_paths(capsys):
    rc, out, _ = _run(["explain", LLAMA], capsys)
    total = vramwise.estimate(LLAMA).total
    assert f"= {total:,} bytes ({total / 2**30:.2f} GiB)" in out
    inst = installed("formulas/unsloth/weights.yaml")
    assert inst is not None and Path(inst).is_file()
    assert f"formulas/unsloth/weights.yaml  ->  {inst}" in out
    assert installed("families/llama.yaml") and installed("docs/nothing.md") is None


@pytest.mark.parametrize("flag,values", [
    ("--params", ["8B", "8e9", "8000000000", "8 B", "8000M"]),
    ("--weight-bytes", ["16GB", "16e9", "16000000000", "16000MB"]),
])
def test_size_suffixes(capsys, flag, values):
    totals = set()
    for v in values:
        rc, out, err = _run(["estimate", flag, v, "--json"], capsys)
        assert rc == 0, err
        totals.add(json.loads(out)["total"])
    assert len(totals) == 1


def test_size_suffix_values(capsys):
    rc, out, _ = _run(["estimate", "--params", "7.5B", "--json"], capsys)
    assert json.loads(out)["total"] == vramwise.estimate_from_size(params=7.5e9).total
    rc, out, _ = _run(["estimate", "--weight-bytes", "15GiB", "--json"], capsys)
    assert json.loads(out)["total"] == vramwise.estimate_from_size(weight_bytes=15 * 2**30).total
    rc, out, _ = _run(["estimate", "--params", "8B"], capsys)
    assert out.splitlines()[0] == "a model of 8.00 B parameters (no config)" and "None" not in out
    for bad in ("8X", "B", "8GiB"):
        rc, out, err = _run(["estimate", "--params", bad], capsys)
        assert rc == 2 and "expected a parameter count such as 8B" in err and len(err.splitlines()) == 2


def test_select_gpu_ids_and_the_old_spelling(cfg, capsys):
    rc, out, err = _run(["select", cfg, "--gpus", "0,2"], capsys)
    assert rc == 2 and out == "" and "--gpu-ids" in err.splitlines()[0] and len(err.splitlines()) == 2
    rc, out, err = _run(["select", cfg, "--gpu-ids", "x"], capsys)
    assert rc == 2 and "--gpu-ids must be comma-separated GPU ids" in err
    rc, out, err = _run(["select", cfg, "--gpu-ids", "0", "--json"], capsys)
    assert rc in (0, 2) and "Traceback" not in err  # no GPU here: a one-line GpuSelectionError


def test_bars_in_tables(cfg, capsys):
    rc, out, _ = _run(["estimate", cfg], capsys)
    weights = next(line for line in out.splitlines() if line.startswith("weights"))
    assert "█" in weights or "▏" in weights


def test_bars_fall_back_to_ascii():
    from vramwise.surfaces.cli.format import bar

    class Latin1(io.StringIO):
        encoding = "latin-1"

    assert bar(0.5, Latin1()) == "#####" and bar(0.67, io.StringIO()) == "██████▋"


@pytest.mark.parametrize("cmd,extra", [
    ("estimate", []), ("compare", []), ("fit", ["--gpu", "24GiB", "--seq-lens", "512,1024"]),
    ("sweep", ["--batch-size", "1,2", "--seq-len", "128,256"]),
])
def test_plot_flag(cfg, capsys, tmp_path, cmd, extra):
    pytest.importorskip("vramwise.answers.plots")
    pytest.importorskip("matplotlib")
    path = tmp_path / "out.svg"
    rc, out, err = _run([cmd, cfg, *extra, "--plot", str(path)], capsys)
    assert rc == 0, err
    assert path.is_file() and path.stat().st_size > 0 and f"wrote {path}" in err
