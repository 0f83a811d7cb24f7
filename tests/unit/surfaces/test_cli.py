"""The command line: tables, JSON, trace, families, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import vramwise
from vramwise.surfaces.cli.main import main

SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


@pytest.fixture()
def cfg(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(SMALL))
    return str(p)


def test_estimate_table(cfg, capsys):
    assert main(["estimate", cfg]) == 0
    out = capsys.readouterr().out
    e = vramwise.estimate(SMALL)
    for comp in ("weights", "lora", "optimizer", "gradients", "activations", "overhead", "total"):
        assert comp in out
    assert f"{e.total / 2**30:,.2f}" in out
    assert "100.0%" in out and "minimum per GPU" not in out
    # the default profile (unsloth): its DDP row, and its own split rule named as such
    assert "per GPU by strategy" in out and "per GPU by the profile's split rule (no strategy): 1 x" in out


def test_estimate_json_equals_api(cfg, capsys):
    assert main(["estimate", cfg, "--method", "full", "--optimizer", "adamw_torch", "--json", "--gpus", "1,2"]) == 0
    data = json.loads(capsys.readouterr().out)
    e = vramwise.estimate(SMALL, method="full", optimizer="adamw_torch")
    assert {k: data[k] for k in e.to_dict()} == e.to_dict()
    assert data["min_per_gpu"] == {"1": e.min_per_gpu(1), "2": e.min_per_gpu(2)}


def test_training_flags_reach_the_estimate(cfg, capsys):
    args = ["estimate", cfg, "--json", "--batch-size", "2", "--seq-len", "512", "--lora-rank", "8",
            "--target-modules", "q_proj,v_proj", "--gradient-checkpointing", "none", "--attention", "eager",
            "--method", "lora", "--load-in-4bit", "true"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    e = vramwise.estimate(SMALL, batch_size=2, seq_len=512, lora_rank=8, target_modules=["q_proj", "v_proj"],
                          gradient_checkpointing="none", attention="eager", method="lora", load_in_4bit=True)
    assert data["total"] == e.total
    assert data["settings"]["target_modules"] == ["q_proj", "v_proj"]


def test_explain(cfg, capsys):
    assert main(["explain", cfg]) == 0
    out = capsys.readouterr().out
    assert "[weights]" in out and "formulas/unsloth/weights.yaml:" in out
    assert "weights_bytes" in out and "with " in out
    assert main(["explain", cfg, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ids = [t["id"] for t in data["trace"]]
    assert ids[-1] in ("total_bytes", "min_per_gpu_bytes") and "layer_saved_bytes" in ids


def test_families(capsys):
    assert main(["families"]) == 0
    out = capsys.readouterr().out
    assert "gemma3_text, gemma3" in out and "families/phi3.yaml" in out
    assert main(["families", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "unsloth" in data["profiles"]


@pytest.mark.parametrize("args,needle", [
    (["estimate", "/no/such/config.json"], "no such file or folder"),
    (["estimate", "{cfg}", "--batch-size", "0"], "batch_size must be a positive integer"),
    (["estimate", "{cfg}", "--seq-len", "-5"], "seq_len must be a positive integer"),
    (["estimate", "{cfg}", "--gradient-checkpointing", "maybe"], "unknown gradient checkpointing mode"),
    (["explain", "{cfg}", "--profile", "nope"], "unknown profile"),
])
def test_errors_are_one_line(cfg, capsys, args, needle):
    args = [a.replace("{cfg}", cfg) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("vramwise: error: ") and needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _exit_code(args) -> int:
    try:
        return main(args)
    except SystemExit as e:  # argparse's own errors
        return e.code


@pytest.mark.parametrize("args", [["estimate", "x", "--method", "dora"], ["estimate", "x", "--batch-size", "two"], []])
def test_argparse_errors_exit_2(args, capsys):
    assert _exit_code(args) == 2


def test_invalid_json_and_missing_fields(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    assert main(["estimate", str(p)]) == 2
    assert "invalid JSON" in capsys.readouterr().err
    p.write_text(json.dumps({"model_type": "llama", "vocab_size": 10}))
    assert main(["estimate", str(p)]) == 2
    assert "config has no hidden_size" in capsys.readouterr().err


def test_console_script_does_not_import_torch(cfg):
    code = (
        "import sys; from vramwise.surfaces.cli.main import main; rc = main(['estimate', sys.argv[1], '--json']);"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; print(bad, file=sys.stderr); sys.exit(rc or len(bad))"
    )
    proc = subprocess.run([sys.executable, "-c", code, cfg], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["family"] == "llama"


def test_module_entry_point(cfg):
    proc = subprocess.run([sys.executable, "-m", "vramwise", "estimate", cfg], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "total" in proc.stdout


def test_hf_profile_table_names_phases_and_figures(cfg, capsys):
    assert main(["estimate", cfg, "--profile", "hf", "--method", "lora", "--loss", "chunked"]) == 0
    out = capsys.readouterr().out
    e = vramwise.estimate(SMALL, profile="hf", method="lora", loss="chunked")
    assert f"the peak is in the {e.peak_phase} phase" in out
    assert f"device {e.figures['device'] / 2**30:,.2f} GiB" in out
    assert main(["estimate", cfg, "--profile", "hf", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["peak_phase"] in ("forward", "backward", "optimizer") and set(data["phases"]) == {
        "forward", "backward", "optimizer"}


def test_hf_profile_errors_are_one_line(cfg, capsys):
    assert main(["estimate", cfg, "--profile", "hf", "--method", "inference"]) == 2
    assert "does not model inference" in capsys.readouterr().err
    assert _exit_code(["estimate", cfg, "--loss", "sparse"]) == 2
    assert "unknown loss 'sparse'" in capsys.readouterr().err


# -- the boundary: one line per bad argument, --version, exit codes, no traceback ---------------

def _run(args, capsys):
    rc = main(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.parametrize("args,prog", [
    ([], "vramwise"),
    (["nonsense"], "vramwise"),
    (["estimate", "x", "--batch-size", "two"], "vramwise estimate"),
    (["estimate", "x", "--batch-size", "9" * 5000], "vramwise estimate"),
    (["estimate", "x", "--lora-dropout", "nan"], "vramwise estimate"),
    (["estimate", "--params", "inf"], "vramwise estimate"),
    (["estimate", "x", "--unknown-flag"], "vramwise estimate"),  # the command's flags are the ones to read
    (["compare", "x", "--method", "lora"], "vramwise compare"),  # not an abbreviation of --methods
    (["estimate", "{cfg}", "--gpus", "0"], "vramwise estimate"),
    (["estimate", "{cfg}", "--gpus", "a,b"], "vramwise estimate"),
    (["estimate", "{cfg}", "--gpus", "1" + "0" * 30], "vramwise estimate"),
    (["select", "x", "--load-in-4bit", "maybe"], "vramwise select"),
    (["measure"], "vramwise measure"),
])
def test_bad_arguments_are_one_line_and_a_help_hint(cfg, capsys, args, prog):
    args = [a.replace("{cfg}", cfg) for a in args]
    rc, out, err = _run(args, capsys)
    assert rc == 2
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("vramwise: error: ") and "usage:" not in err
    assert lines[1] == f"run '{prog} --help' for usage"
    assert out == ""


def test_version(capsys):
    rc, out, err = _run(["--version"], capsys)
    assert rc == 0 and out == f"vramwise {vramwise.__version__}\n" and err == ""


def test_help_exits_0(capsys):
    rc, out, _ = _run(["estimate", "--help"], capsys)
    assert rc == 0 and "--batch-size" in out


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe{\x00}\x00", b"", b'{"model_type": "llama"}'])
def test_select_on_a_bad_config_exits_2(tmp_path, capsys, content):
    p = tmp_path / "config.json"
    p.write_bytes(content)
    for extra in ([], ["--json"]):
        rc, out, err = _run(["select", str(p), *extra], capsys)
        assert rc == 2 and out == "", (out, err)
        assert err.startswith("vramwise: error: ") and len(err.splitlines()) == 1


def test_select_without_a_model_is_the_documented_fallback(capsys):
    rc, out, err = _run(["select"], capsys)
    assert rc == 0 and "no estimate: no MODEL given" in out and "mode:" in out


def test_select_missing_file_exits_2(capsys):
    rc, _, err = _run(["select", "/no/such/config.json"], capsys)
    assert rc == 2 and "no such file or folder" in err


def test_unexpected_exception_is_one_line_with_its_own_code(cfg, capsys, monkeypatch):
    import vramwise.estimation.estimate as estimation
    import vramwise.surfaces.cli.main as cli

    def boom(*a, **k):
        raise KeyError("surprise")

    monkeypatch.setattr(estimation, "estimate", boom)
    monkeypatch.delenv("VRAMWISE_DEBUG", raising=False)
    rc, out, err = _run(["estimate", cfg], capsys)
    assert rc == cli.EXIT_INTERNAL == 70
    assert err.startswith("vramwise: internal error: KeyError: 'surprise'") and len(err.splitlines()) == 1
    monkeypatch.setenv("VRAMWISE_DEBUG", "1")
    with pytest.raises(KeyError):
        main(["estimate", cfg])


@pytest.mark.parametrize("content,needle", [
    (b"\xe9t\xe9", "not UTF-8"), (b"[" * 50_000, "nest deeper"), (b'{"a": NaN}', "NaN"),
    (b'{"a": ' + b"1" * 5000 + b"}", "invalid JSON"),
])
def test_bad_config_files_exit_2_in_one_line(tmp_path, capsys, content, needle):
    p = tmp_path / "config.json"
    p.write_bytes(content)
    for cmd in ("estimate", "explain"):
        rc, out, err = _run([cmd, str(p)], capsys)
        assert rc == 2 and needle in err and len(err.splitlines()) == 1 and out == ""


def test_long_and_unreadable_paths_exit_2(tmp_path, capsys):
    rc, _, err = _run(["estimate", str(tmp_path / ("x" * 300))], capsys)
    assert rc == 2 and "too long" in err and len(err.splitlines()) == 1
    (tmp_path / "folder" / "config.json").mkdir(parents=True)
    rc, _, err = _run(["estimate", str(tmp_path / "folder")], capsys)
    assert rc == 2 and "is a folder" in err


def test_no_traceback_for_many_bad_invocations(cfg, tmp_path, capsys):
    bad = [["estimate", "\x00"], ["estimate", ""], ["explain", "org/"], ["estimate", cfg, "--seq-len", "-1"],
           ["estimate", cfg, "--params", "1e9"], ["families", "--json", "x"], ["gpus", "--nope"],
           ["check", str(tmp_path / "empty")], ["estimate", str(tmp_path / "empty")], ["select", cfg, "--gpus", "x"]]
    (tmp_path / "empty").mkdir()
    for args in bad:
        rc = main(args)
        err = capsys.readouterr().err
        assert rc == 2, (args, err)
        assert "Traceback" not in err and err.startswith("vramwise: error: "), (args, err)


def test_families_lists_profile_summaries(capsys):
    assert main(["families"]) == 0
    out = capsys.readouterr().out
    reg = vramwise.Registry.default()
    for p in reg.profile_names():
        assert f"  {p}: {reg.profile(p).summary}" in out
    assert main(["families", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["profile_summaries"]["hf"] == reg.profile("hf").summary


@pytest.mark.parametrize("args", [["fit", "x", "--gpu", "24GiB", "--unknown"], ["compare", "x", "--batch-size", "two"],
                                  ["sweep", "x", "--format", "xml"], ["select", "x", "--gpus", "1"]])
def test_new_commands_bad_arguments_have_a_help_hint(args, capsys):
    rc, out, err = _run(args, capsys)
    assert rc == 2 and out == "" and len(err.splitlines()) == 2 and err.startswith("vramwise: error: ")
