"""`vramwise fit FOLDER --profile llama.cpp` over a folder of GGUF quantizations, `fit hub:ORG/NAME` over a hub
repository's (a local server standing in for the hub: tests/fake_hub.py) and `--quant NAME`. The figures are
derived in tests/unit/answers/test_quant_pick.py: at n_ctx 4,096 with every layer on the GPU (and the compute
buffer), F16 takes 13,007,872 bytes, Q8_0 11,829,952 and Q4_K_M 11,201,728; on 12 MiB (12,582,912) the largest n_ctx
is 3,840, 4,352 and 4,608, and F16 keeps 2 layers at n_ctx 4,096 (9,727,000 bytes)."""

from __future__ import annotations

import json

import pytest

from vramwise.surfaces.cli.main import main

pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes the "
                                   "GGUF files these tests read")

from fake_hub import REPO, SHA, fake_hub  # noqa: E402  (tests/fake_hub.py)
from gguf_files import write_qwen2_as  # noqa: E402  (tests/gguf_files.py)

ARGS = ["--profile", "llama.cpp", "--gpu", "12MiB", "--n-ctx", "4096"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli-quants")
    write_qwen2_as(d / "tiny-F16.gguf", "F16")
    write_qwen2_as(d / "tiny-Q8_0.gguf", "Q8_0")
    write_qwen2_as(d / "tiny-Q4_K_M.gguf", "Q4_K_M", split_max_tensors=15)
    return d


def _row(out: str, name: str) -> list:
    return next(line.split() for line in out.splitlines() if line.startswith(name + " "))


def test_the_table_and_the_pick(folder, capsys):
    assert main(["fit", str(folder), *ARGS]) == 0
    out = capsys.readouterr().out
    assert "3 quantizations" in out
    # quant, file type, weights, GPU and host GiB, verdict, largest n_ctx, n_gpu_layers, file
    assert _row(out, "F16")[5:] == ["does", "not", "fit", "3,840", "2", "tiny-F16.gguf"]
    assert _row(out, "Q8_0")[5:] == ["fits", "4,352", "all", "tiny-Q8_0.gguf"]
    assert _row(out, "Q4_K_M")[5:] == ["fits", "4,608", "all", "tiny-Q4_K_M-00001-of-00002.gguf", "(+1", "shards)"]
    assert "pick: Q8_0: Q8_0 is the largest quantization that fits" in out


def test_json(folder, capsys):
    assert main(["fit", str(folder), *ARGS, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pick"] == "Q8_0"
    assert {o["name"]: o["gpu_bytes"] for o in data["options"]} == {"F16": 13_007_872, "Q8_0": 11_829_952,
                                                                   "Q4_K_M": 11_201_728}


def test_quant_by_name(folder, capsys):
    assert main(["fit", str(folder), *ARGS, "--quant", "Q4_K_M"]) == 0
    out = capsys.readouterr().out
    assert "largest n_ctx: 4,608 (n_parallel 1, cache f16/f16, n_gpu_layers all)" in out
    assert main(["fit", str(folder), *ARGS, "--quant", "IQ4_XS"]) == 2
    err = capsys.readouterr().err
    assert "no quantization IQ4_XS in" in err and "present: F16, Q8_0, Q4_K_M" in err
    assert main(["fit", str(folder / "tiny-F16.gguf"), *ARGS, "--quant", "Q8_0"]) == 2
    assert "is one file: give its folder" in capsys.readouterr().err


def test_a_folder_of_one_model_is_answered_as_before(tmp_path, capsys):
    write_qwen2_as(tmp_path / "tiny-Q8_0.gguf", "Q8_0")
    assert main(["fit", str(tmp_path), *ARGS]) == 0
    out = capsys.readouterr().out
    assert "largest n_ctx: 4,352" in out and "quantizations" not in out


def test_hub_repository(folder, capsys, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with fake_hub(folder) as (endpoint, log):
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)
        assert main(["fit", f"hub:{REPO}", *ARGS]) == 0
        assert all(r is not None for _, r, _ in log)  # range requests only
    out = capsys.readouterr().out
    assert f"hub:{REPO} at {SHA}: 3 quantizations" in out
    assert _row(out, "Q8_0")[5:] == ["fits", "4,352", "all", "tiny-Q8_0.gguf"]
    assert "pick: Q8_0" in out


def test_hub_offline_is_one_line(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["fit", f"hub:{REPO}", *ARGS]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HF_HUB_OFFLINE is set" in err and "give the folder" in err
