"""--gpus never means two things: with a strategy it is the number of GPUs the strategy runs on (the world
size), and one GPU is "1 GPU"."""

from __future__ import annotations

import json
from pathlib import Path

import vramwise
from vramwise.surfaces.cli.main import main

LLAMA = str(Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")
FSDP = ["estimate", LLAMA, "--profile", "hf", "--method", "full", "--strategy", "fsdp"]


def _run(args, capsys):
    rc = main(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_gpus_sets_the_world_size_under_a_strategy(capsys):
    rc, out, err = _run(FSDP + ["--gpus", "8", "--json"], capsys)
    d = json.loads(out)
    e = vramwise.estimate(LLAMA, profile="hf", method="full", strategy="fsdp", world_size=8)
    assert rc == 0 and d["world_size"] == 8 and d["total"] == e.total
    rc, out, _ = _run(FSDP + ["--gpus", "8"], capsys)
    assert "fsdp on 8 GPUs" in out


def test_gpus_that_would_mean_something_else_is_refused(capsys):
    rc, _, err = _run(FSDP + ["--gpus", "8", "--world-size", "4"], capsys)
    assert rc != 0 and "--world-size" in err and "disagree" in err
    rc, _, err = _run(FSDP + ["--gpus", "2,4"], capsys)
    assert rc != 0 and "--world-size" in err
    rc, _, err = _run(["estimate", LLAMA, "--profile", "vllm", "--method", "inference", "--gpu", "H100", "--gpus", "2"],
                      capsys)
    assert rc != 0 and "--tensor-parallel-size" in err


def test_one_gpu_is_singular(capsys):
    rc, out, _ = _run(FSDP, capsys)
    assert rc == 0 and "fsdp on 1 GPU:" in out and "fsdp on 1 GPU\n" in out and "1 GPUs" not in out


def test_without_a_strategy_gpus_is_the_list_of_counts(capsys):
    rc, out, _ = _run(["estimate", LLAMA, "--gpus", "1,3"], capsys)
    e = vramwise.estimate(LLAMA)
    assert rc == 0 and f"3 x {e.min_per_gpu(3) / 2**30:,.2f} GiB" in out
