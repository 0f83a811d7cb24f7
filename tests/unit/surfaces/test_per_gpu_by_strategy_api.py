"""``/api/estimate`` carries ``per_gpu_by_strategy`` as ``estimate --json`` does, each figure the strategy's
own estimate through the public API, and keeps ``min_per_gpu`` as it was."""

from __future__ import annotations

import pytest

import vramwise

pytest.importorskip("starlette")

from serve_client import client, no_hub  # noqa: E402,F401

MODEL = "meta-llama/Llama-3.1-8B"
SETTINGS = {"profile": "hf", "method": "full", "optimizer": "adamw_torch", "gradient_checkpointing": True}


def test_api_estimate_reports_each_strategy_per_gpu_and_the_best(client):
    r = client.post("/api/estimate", json={"model": MODEL, **SETTINGS, "gpus": [1, 8]})
    assert r.status_code == 200, r.json()
    data = r.json()
    e = vramwise.estimate(MODEL, **SETTINGS)
    assert data["min_per_gpu"] == {"1": e.min_per_gpu(1), "8": e.min_per_gpu(8)}
    eight = data["per_gpu_by_strategy"]["counts"]["8"]
    for s, b in eight["per_gpu"].items():
        assert b == vramwise.estimate(MODEL, **SETTINGS, strategy=s, world_size=8).total
    assert eight["per_gpu"][eight["best"]] == min(eight["per_gpu"].values())
    assert "device_map" in data["per_gpu_by_strategy"]["counts"]["1"]["refused"]  # it needs 2 GPUs at least


def test_api_estimate_of_a_serving_profile_has_no_strategies(client):
    r = client.post("/api/estimate", json={"model": MODEL, "profile": "vllm", "method": "inference", "gpu": "H100"})
    assert r.status_code == 200 and "per_gpu_by_strategy" not in r.json()
