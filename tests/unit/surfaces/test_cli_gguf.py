"""`vramwise estimate MODEL.gguf`: an inference estimate with the file's own weights, one line for what it cannot do,
and an estimate from a config.json that imports neither the gguf package nor numpy (nor torch)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vramwise.inputs import gguf as vg
from vramwise.surfaces.cli.main import main

pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes the "
                                   "GGUF files these tests read")

from gguf_files import TOTAL_BYTES, write_qwen2  # noqa: E402  (tests/gguf_files.py: the file, its bytes by hand)


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "tiny-Q4_K_M.gguf"
    write_qwen2(path)
    return str(path)


def test_inference_estimate_of_a_gguf(model, capsys):
    assert main(["estimate", model, "--method", "inference"]) == 0
    out = capsys.readouterr().out
    assert "family qwen2 (qwen2), profile unsloth; inference, batch 4, seq 2048" in out
    assert "GGUF Q4_K_M weights as stored" in out
    assert main(["estimate", model, "--method", "inference", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["weights"] == TOTAL_BYTES  # 1,129,152 bytes: tests/gguf_files.py derives it tensor by tensor
    assert data["family"] == "qwen2"


def test_training_on_a_gguf_is_one_line(model, capsys):
    assert main(["estimate", model]) == 2  # the default method, qlora
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "a GGUF Q4_K_M file holds quantized weights for inference (llama.cpp)" in err
    assert "needs the model's config.json or its hub id" in err
    assert "invalid JSON" not in err


def test_missing_gguf_package_is_one_line(model, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)
    vg._read_files.cache_clear()
    assert main(["estimate", model, "--method", "inference"]) == 2
    err = capsys.readouterr().err
    assert err == "vramwise: error: reading a GGUF file needs the gguf package (llama.cpp's reader): pip install " \
                  "'vramwise[gguf]'\n"


def test_a_config_json_estimate_imports_no_gguf_numpy_or_torch(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
                               "num_hidden_layers": 2, "num_attention_heads": 4}))
    code = ("import sys; from vramwise.surfaces.cli.main import main; rc = main(['estimate', sys.argv[1], '--json']);"
            "bad = [m for m in ('torch', 'transformers', 'gguf', 'numpy') if m in sys.modules];"
            "print(bad, file=sys.stderr); sys.exit(rc or len(bad))")
    proc = subprocess.run([sys.executable, "-c", code, str(cfg)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["family"] == "llama"
