"""`vramwise fit MODEL.gguf --profile llama.cpp` and `--preset ollama` / `--modelfile` / `--ollama-env`: the local
answers printed and as JSON. The figures are derived in tests/unit/answers/test_local_fit.py: the small Qwen2 of
tests/gguf_files.py takes 975,552 bytes of weights on the GPU and 1,024 bytes a cell of f16 cache; its compute buffer
at n_ubatch 512 with flash attention (auto: on), on a GPU that runs the layers, takes the f16 mask, 1,024 bytes a cell,
and four hidden states, 2,097,152: with every layer offloaded the GPU holds 3,072,704 + 2,048 bytes a cell."""

from __future__ import annotations

import json

import pytest

from vramwise.surfaces.cli.main import main

pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes the "
                                   "GGUF files these tests read")

from gguf_files import write_qwen2  # noqa: E402  (tests/gguf_files.py)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli-local") / "tiny-Q4_K_M.gguf"
    write_qwen2(path)
    return str(path)


def test_fit_prints_the_local_answers(model, capsys):
    assert main(["fit", model, "--profile", "llama.cpp", "--gpu", "10MiB", "--n-ctx", "4096"]) == 0
    out = capsys.readouterr().out
    # 3,072,704 + 2,048 x cells <= 10,485,760 -> cells <= 3,619.6 -> 3,584 (14 x 256)
    assert "largest n_ctx: 3,584 (n_parallel 1, cache f16/f16, n_gpu_layers all)" in out
    # k = 2: 8,917,696 bytes on the GPU, k = 3: 11,461,312 (test_local_fit.py)
    assert "n_gpu_layers at n_ctx 4,096: 2 of 3 (the last layer and the output layer)" in out
    assert "parallel sequences of 4,096 tokens each: none (one does not fit)" in out
    assert "does not fit" in out
    assert "frontier" not in out and "LoRA rank" not in out


def test_fit_json(model, capsys):
    assert main(["fit", model, "--profile", "llama.cpp", "--gpu", "11MiB", "--n-ctx", "4096", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # 2,048 x cells <= 11,534,336 - 3,072,704 = 8,461,632 -> cells <= 4,131.7 -> 4,096; at 4,096 cells every layer
    # fits (11,461,312 bytes)
    assert (data["max_n_ctx"], data["max_n_gpu_layers"], data["all_layers"]) == (4096, 3, True)
    # the token embedding, the logits and the host's compute buffer (the mask 4,194,304 and a hidden state 524,288)
    assert data["host_bytes_at_max_layers"] == 153_600 + 1_160 + 4_718_592
    assert data["verdict"]["label"] == "fits"


def test_fit_over_two_gpus_judges_each(model, capsys):
    assert main(["fit", model, "--profile", "llama.cpp", "--gpu", "8MiB", "--gpus", "2", "--n-ctx", "4096"]) == 0
    out = capsys.readouterr().out
    # 3 layers on GPUs (2 and the output), split equally: both layers on GPU 0 (positions 0 and 1 below 0.5 x 3),
    # the output layer on GPU 1. Every layer on the GPUs: pipeline parallelism, each GPU keeping 4 copies of its
    # inputs, 4 x (4,194,304 + 524,288) = 18,874,368. GPU 0: 892,928 + 4,096 x 1,024 + 6,291,456 + 18,874,368 =
    # 30,253,056 bytes (0.03 GiB); GPU 1: 82,624 + the logits and a hidden state 1,118,208 + 18,874,368 = 20,075,200
    # (0.02 GiB)
    assert "GPU 0 0.03 GiB, GPU 1 0.02 GiB, host" in " ".join(out.split())  # the line as printed, unwrapped
    assert main(["fit", model, "--profile", "llama.cpp", "--gpu", "8MiB", "--gpus", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpus"] == 2 and [g["gpu"] for g in data["per_gpu"]] == [0, 1]


def test_modelfile_and_environment_with_their_origins(model, tmp_path, capsys, monkeypatch):
    mf = tmp_path / "Modelfile"
    mf.write_text("FROM ./tiny-Q4_K_M.gguf\nPARAMETER num_ctx 2048\nPARAMETER num_gpu 2\n")
    monkeypatch.setenv("OLLAMA_NUM_PARALLEL", "2")
    monkeypatch.setenv("OLLAMA_KV_CACHE_TYPE", "q8_0")
    assert main(["fit", model, "--modelfile", str(mf), "--ollama-env", "--gpu", "8MiB", "--flash-attn", "on"]) == 0
    out = capsys.readouterr().out
    assert "preset ollama 0.32.15:" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and len(line.split()) > 2}
    # -c 2,048 x 2
    assert rows["n_ctx"].split()[1] == "4096" and f"Modelfile {mf}:2 (PARAMETER num_ctx)" in rows["n_ctx"]
    assert "environment OLLAMA_NUM_PARALLEL=2" in rows["n_parallel"]
    assert rows["cache_type_k"].split()[1:] == ["q8_0", "environment", "OLLAMA_KV_CACHE_TYPE=q8_0"]
    assert rows["flash_attn"].split()[1:] == ["on", "given"]
    assert rows["n_batch"].split()[1:] == ["512", "ollama", "0.32.15", "default"]
    assert "the answers as ollama options: num_ctx" in out


def test_environment_is_read_only_when_asked(model, tmp_path, capsys, monkeypatch):
    mf = tmp_path / "Modelfile"
    mf.write_text("PARAMETER num_ctx 1024\n")
    monkeypatch.setenv("OLLAMA_NUM_PARALLEL", "4")
    assert main(["fit", model, "--modelfile", str(mf), "--gpu", "8MiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["n_parallel"] == 1 and data["settings"]["n_ctx"] == 1024
    assert data["origins"]["n_parallel"] == "ollama 0.32.15 default"


def test_preset_default_context_follows_the_gpu(model, capsys):
    # 24 GiB reaches Ollama's 32,768 tier, the model's training context too
    assert main(["fit", model, "--preset", "ollama", "--gpu", "24GiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["n_ctx"] == 32768
    assert data["origins"]["n_ctx"] == "ollama 0.32.15 default for the GPU's memory"


def test_estimate_with_a_modelfile(model, tmp_path, capsys, monkeypatch):
    mf = tmp_path / "Modelfile"
    mf.write_text("FROM ./tiny-Q4_K_M.gguf\nPARAMETER num_ctx 8192\n")
    monkeypatch.setenv("OLLAMA_NUM_PARALLEL", "2")
    assert main(["estimate", model, "--modelfile", str(mf), "--ollama-env", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # -c 8,192 x 2 -np 2: two streams of 8,192 cells; 2 layers x 16,384 cells x 512 bytes of f16 K and V
    assert data["figures"]["n_ctx"] == 16384 and data["figures"]["kv_cache"] == 2 * 16384 * 512
    assert data["origins"]["n_parallel"] == "environment OLLAMA_NUM_PARALLEL=2"
    assert main(["estimate", model, "--modelfile", str(mf)]) == 0
    out = capsys.readouterr().out
    assert "preset ollama 0.32.15:" in out and f"Modelfile {mf}:2 (PARAMETER num_ctx)" in out


def test_estimate_without_a_context_asks_for_one(model, capsys):
    assert main(["estimate", model, "--preset", "ollama"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "give the GPU (fit --gpu) or PARAMETER num_ctx or OLLAMA_CONTEXT_LENGTH" in err


def test_a_frontier_is_refused_in_one_line(model, capsys):
    assert main(["fit", model, "--profile", "llama.cpp", "--gpu", "8MiB", "--seq-lens", "1024"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a training frontier" in err


def test_estimate_on_a_gpu_prints_the_figures_then_the_verdict(model, capsys):
    # 3,072,704 + 4,096 cells x 2,048 = 11,461,312 bytes on the GPU; 12 MiB = 12,582,912 leaves 1,121,600
    assert main(["estimate", model, "--profile", "llama.cpp", "--gpu", "12MiB", "--n-ctx", "4096", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["figures"]["gpu_total"] == 11_461_312
    assert (data["fit"]["verdict"]["label"], data["fit"]["verdict"]["margin_bytes"]) == ("fits", 1_121_600)
    assert main(["estimate", model, "--profile", "llama.cpp", "--gpu", "4MiB", "--n-ctx", "4096"]) == 0
    out = capsys.readouterr().out
    assert "GPU: weights" in out  # the estimate's per-device lines first
    # 4 MiB = 4,194,304 bytes: 11,461,312 (0.01 GiB) on the GPU is 7,267,008 (0.01 GiB) short; the host 4,873,352
    assert "on the GPU: 0.01 GiB, on the host: 0.00 GiB: does not fit, 0.01 GiB short of 0.00 GiB per GPU" in out
    assert main(["estimate", model, "--profile", "llama.cpp", "--gpu", "8MiB", "--gpus", "2", "--n-ctx", "4096"]) == 0
    out = capsys.readouterr().out
    assert "GPU 0: weights" in out and "GPU 1: weights" in out and "GPU: weights" not in out
    assert "on the 2 GPUs: GPU 0 0.03 GiB, GPU 1 0.02 GiB" in " ".join(out.split())  # as test_fit_over_two_gpus_...
    assert main(["estimate", model, "--profile", "llama.cpp", "--gpu", "8MiB", "--gpus", "1,2"]) == 2
    err = capsys.readouterr().err
    assert "give one number" in err
