"""A field means one thing on the command line, in the JSON API and in the Python API, or is refused with
the fix named: gpus under a strategy (the GPUs it runs on), a GPU named for a training estimate (whether
the run fits is fit's question), and headroom (a share, 0.1 or 10%, never a bare 10 read as 10 %)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vramwise
from vramwise.surfaces.cli.main import main

pytest.importorskip("starlette")

from serve_client import client, no_hub  # noqa: E402,F401

LLAMA = str(Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")
MODEL = "meta-llama/Llama-3.1-8B"
FSDP = {"model": MODEL, "profile": "hf", "method": "full", "strategy": "fsdp"}


def test_api_gpus_under_a_strategy_is_the_world_size_as_on_the_command_line(client):
    r = client.post("/api/estimate", json={**FSDP, "gpus": 8})
    want = vramwise.estimate(MODEL, profile="hf", method="full", strategy="fsdp", world_size=8)
    assert r.status_code == 200 and r.json()["world_size"] == 8 and r.json()["total"] == want.total
    for body, named in (({**FSDP, "gpus": [2, 4]}, "world_size"), ({**FSDP, "gpus": 8, "world_size": 4}, "disagree"),
                        ({"model": MODEL, "profile": "vllm", "method": "inference", "gpu": "H100", "gpus": 2},
                         "tensor_parallel_size")):
        r = client.post("/api/estimate", json=body)
        assert r.status_code == 400 and named in r.json()["error"], (body, r.json())
    # without a strategy gpus stays the list of counts the per-GPU minimum is shown for
    r = client.post("/api/estimate", json={"model": MODEL, "gpus": [1, 3]})
    assert r.status_code == 200 and set(r.json()["min_per_gpu"]) == {"1", "3"}


def test_a_gpu_named_for_a_training_estimate_is_refused_naming_fit(client, capsys):
    # a user who names a GPU asks whether the run fits on it: estimate does not answer that, fit does
    with pytest.raises(vramwise.SettingsError, match=r"vramwise fit MODEL --gpu H100"):
        vramwise.estimate(LLAMA, gpu="H100")
    with pytest.raises(vramwise.SettingsError, match="serving profile"):
        vramwise.estimate(LLAMA, profile="hf", method="lora", gpu_memory="80GB")
    assert main(["estimate", LLAMA, "--gpu", "H100"]) == 2
    assert "vramwise fit MODEL --gpu H100" in capsys.readouterr().err
    r = client.post("/api/estimate", json={"model": MODEL, "gpu": "H100"})
    assert r.status_code == 400 and "vramwise fit MODEL --gpu H100" in r.json()["error"]
    # fit's own gpu is the GPU it answers for, and a serving estimate's gpu is vLLM's: both still answered
    assert vramwise.fit(LLAMA, gpu="H100").gpus == 1
    assert vramwise.estimate(LLAMA, profile="vllm", method="inference", gpu="H100").serving is not None


def test_headroom_is_a_share_everywhere(client, capsys):
    # --headroom 10% and --headroom 0.1 are the same share; a bare 10 is refused, not read as 10 %
    f = vramwise.fit(LLAMA, gpu="24GiB", headroom=0.1)
    assert f.usable_bytes == int(24 * 2**30 * 0.9)
    assert main(["fit", LLAMA, "--gpu", "24GiB", "--headroom", "10%", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["usable_bytes"] == f.usable_bytes
    assert main(["fit", LLAMA, "--gpu", "24GiB", "--headroom", "10"]) == 2
    assert "0% to 90%" in capsys.readouterr().err
    r = client.post("/api/fit", json={"model": MODEL, "gpu": "24GiB", "headroom": 10})
    assert r.status_code == 400 and "headroom" in r.json()["error"]
    a = client.get("/api/address", params={"headroom": "10%"}).json()["fields"]["headroom"]
    assert a == {"value": 0.1}


def test_compare_under_a_strategy_estimates_on_the_gpus_compared_on():
    # asked about 8 H100s, the FSDP column is FSDP on 8 ranks (before: one rank's figure checked against 8 GPUs)
    c = vramwise.compare(LLAMA, methods=("full",), profiles=("hf",), gpu="H100", gpus=8, strategy="fsdp")
    want = vramwise.estimate(LLAMA, profile="hf", method="full", strategy="fsdp", world_size=8)
    assert c.to_dict()["cells"][0]["total"] == want.total
    with pytest.raises(vramwise.SettingsError, match="world_size 4 differs from the 8 GPU"):
        vramwise.compare(LLAMA, methods=("full",), profiles=("hf",), gpu="H100", gpus=8, strategy="fsdp", world_size=4)


def test_compare_refuses_a_method_or_profile_it_would_drop(client, capsys):
    # compare's columns are --methods and --profiles: --method was taken as an abbreviation of --methods, and an
    # unlisted --profile beside --profiles was ignored
    assert main(["compare", LLAMA, "--method", "lora"]) == 2
    assert "unrecognized arguments: --method lora (did you mean --methods?)" in capsys.readouterr().err
    assert main(["compare", LLAMA, "--profile", "hf", "--profiles", "unsloth"]) == 2
    assert "--profile hf is not among --profiles unsloth" in capsys.readouterr().err
    assert main(["compare", LLAMA, "--profile", "hf", "--profiles", "unsloth,hf", "--json"]) == 0  # listed: fine
    capsys.readouterr()
    r = client.post("/api/compare", json={"model": MODEL, "method": "lora"})
    assert r.status_code == 400 and "send methods" in r.json()["error"]
    r = client.post("/api/compare", json={"model": MODEL, "profile": "hf", "profiles": ["unsloth"]})
    assert r.status_code == 400 and "'hf' is not among them" in r.json()["error"]


def test_a_training_batch_or_sequence_under_a_serving_profile_is_refused_naming_vllms_settings(client, capsys):
    # --seq-len 4096 under --profile vllm was ignored: the server was sized for the model's whole context
    with pytest.raises(vramwise.SettingsError, match="max_model_len"):
        vramwise.estimate(LLAMA, profile="vllm", method="inference", gpu="H100", seq_len=4096)
    with pytest.raises(vramwise.SettingsError, match="max_num_seqs"):
        vramwise.estimate(LLAMA, profile="vllm", method="inference", gpu="H100", batch_size=8)
    assert main(["estimate", LLAMA, "--profile", "vllm", "--method", "inference", "--gpu", "H100", "--seq-len", "4096"]) == 2
    assert "--max-model-len" in capsys.readouterr().err
    # a compare with a training column and a serving column: the batch is the training columns'
    c = vramwise.compare(LLAMA, methods=("inference",), profiles=("unsloth", "vllm"), gpu="H100", batch_size=8)
    served = vramwise.estimate(LLAMA, profile="vllm", method="inference", gpu="H100")
    totals = {cell["profile"]: cell["total"] for cell in c.to_dict()["cells"]}
    assert totals["vllm"] == served.total
    assert totals["unsloth"] == vramwise.estimate(LLAMA, method="inference", batch_size=8).total
