"""The command line under the vllm profile: estimate prints the budget as vLLM logs it, fit the largest
context, the concurrency and the utilization a context needs; every figure is the library's."""

from __future__ import annotations

import json
from pathlib import Path

import vramwise
from vramwise.surfaces.cli.main import main

LLAMA = str(Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")
ARGS = ["--method", "inference", "--profile", "vllm", "--gpu", "H100", "--vllm-version", "0.19.0"]


def _run(args, capsys):
    rc = main(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_estimate_prints_vllms_lines(capsys):
    rc, out, err = _run(["estimate", LLAMA, *ARGS, "--max-model-len", "32768"], capsys)
    assert rc == 0 and err == ""
    e = vramwise.estimate(LLAMA, profile="vllm", method="inference", gpu="H100", vllm_version="0.19.0",
                          max_model_len=32768)
    f = e.figures
    assert f"Model loading took {f['weights'] / 2**30:,.2f} GiB" in out
    assert f"Available KV cache memory: {f['available_kv'] / 2**30:,.2f} GiB" in out
    assert f"GPU KV cache size: {f['kv_cache_tokens']:,} tokens" in out
    assert f"Maximum concurrency for 32,768 tokens per request: {f['max_concurrency']:,.2f}x" in out
    assert "vLLM starts: yes" in out and "serving, 16-bit weights" in out
    assert "batch 4" not in out  # the training settings are not shown


def test_estimate_json_says_whether_it_starts(capsys):
    rc, out, _ = _run(["estimate", LLAMA, *ARGS, "--max-model-len", "32768", "--json"], capsys)
    d = json.loads(out)
    assert rc == 0 and d["serving"]["starts"] is True and d["serving"]["largest_max_model_len"] == 131072
    assert d["figures"]["kv_cache_tokens"] == d["serving"]["kv_cache_tokens"]


def test_a_refusal_says_why_and_what_starts(capsys):
    rc, out, _ = _run(["estimate", LLAMA, "--method", "inference", "--profile", "vllm", "--gpu-memory", "20GiB",
                       "--vllm-version", "0.19.0"], capsys)
    e = vramwise.estimate(LLAMA, profile="vllm", method="inference", gpu_memory="20GiB", vllm_version="0.19.0")
    assert rc == 0 and "vLLM starts: no: one request of 131,072 tokens needs" in out
    assert f"the largest max_model_len that starts is {e.serving['largest_max_model_len']:,}" in out


def test_fit_answers(capsys):
    rc, out, err = _run(["fit", LLAMA, *ARGS, "--max-model-len", "32768"], capsys)
    f = vramwise.fit(LLAMA, gpu="H100", profile="vllm", method="inference", vllm_version="0.19.0", max_model_len=32768)
    assert rc == 0 and err == ""
    assert f"largest max_model_len that starts: {f.largest_max_model_len:,}" in out
    assert f"gpu_memory_utilization that 32,768 tokens need: {f.utilization_needed:.2f}" in out
    assert "by tensor_parallel_size:" in out and "  8:" in out


def test_mistakes_are_named(capsys):
    rc, _, err = _run(["estimate", LLAMA, "--method", "inference", "--profile", "vllm"], capsys)
    assert rc != 0 and "--gpu H100" in err and "Traceback" not in err
    rc, _, err = _run(["fit", LLAMA, *ARGS, "--gpus", "2"], capsys)
    assert rc != 0 and "--tensor-parallel-size" in err
    rc, _, err = _run(["estimate", LLAMA, *ARGS, "--gpu-memory-utilization", "1.5"], capsys)
    assert rc != 0 and "gpu_memory_utilization" in err
    rc, _, err = _run(["fit", LLAMA, *ARGS, "--plot", "x.png"], capsys)
    assert rc != 0 and "--plot" in err


def test_compare_gives_a_serving_profile_the_gpu_compared_on():
    c = vramwise.compare(LLAMA, methods=("inference",), profiles=("unsloth", "vllm"), gpu="H100")
    cell = next(x for x in c.cells if x[0] == "vllm")
    e = vramwise.estimate(LLAMA, profile="vllm", method="inference", gpu="H100")
    assert cell[2].total == e.total and cell[3] is None
