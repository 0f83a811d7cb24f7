"""The studio profile (Unsloth Studio's estimator) is offered wherever a profile is chosen: the command line's
estimate (table and JSON) and compare, and the server's API and the page's profile menu (its list comes from
/api/families). Expected figures are derived by hand from docs/unsloth-profile.md."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from vramwise.surfaces.cli import main as cli

# 4 layers, hidden 1024, 8 heads of 128, MLP 4096, vocabulary 32000, untied head (formulas/studio/cases.yaml)
TINY = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 8,
        "num_key_value_heads": 8, "num_hidden_layers": 4, "vocab_size": 32000, "max_position_embeddings": 4096,
        "tie_word_embeddings": False}
SETTINGS = {"method": "qlora", "lora_rank": 16, "batch_size": 2, "seq_len": 1024,
            "gradient_checkpointing": "unsloth", "optimizer": "adamw_8bit", "attention": "sdpa"}
FLAGS = ["--method", "qlora", "--lora-rank", "16", "--batch-size", "2", "--seq-len", "1024",
         "--gradient-checkpointing", "unsloth", "--optimizer", "adamw_8bit", "--attention", "sdpa"]
# quantizable: 4 x (4 x 1024^2 + 3 x 4096 x 1024) = 67,108,864; the rest: 2 x 32000 x 1024 + 9 x 1024 = 65,545,216
WEIGHTS = 67_108_864 * 2 / 3.2 + 65_545_216 * 2           # NF4 layers, 16-bit rest: 173,033,472
LORA_PARAMS = 16 * 4 * (4 * (1024 + 1024) + 3 * (1024 + 4096))  # 1,507,328
ACTIVATIONS = 2048 * (3072 + 2 + 2 * 4096) * 2 * 1.25     # one layer at S x B = 2048 (Unsloth checkpointing, LoRA)
TOTAL = (WEIGHTS + 2 * LORA_PARAMS + 4 * LORA_PARAMS      # weights, adapters, adamw_8bit's 4 bytes a parameter
         + ACTIVATIONS + 0.15 * WEIGHTS                    # the gradient floor: 15 % of the weights, below the activations
         + 1.4 * 2**30)                                    # CUDA overhead: 1,768,952,934.4 in all


def _cli_json(*argv) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(list(argv)) == 0
    return json.loads(out.getvalue())


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def test_estimate_with_profile_studio(tiny, capsys):
    got = _cli_json("estimate", tiny, "--profile", "studio", *FLAGS, "--json")
    assert got["profile"] == "studio"
    assert abs(got["total"] - TOTAL) <= 1 and abs(got["weights"] - WEIGHTS) <= 1
    assert cli.main(["estimate", tiny, "--profile", "studio", *FLAGS]) == 0
    out = capsys.readouterr().out
    assert "profile studio: what Unsloth Studio's training-VRAM estimator says" in out
    total_row = next(line for line in out.splitlines() if line.startswith("total "))
    assert total_row.split()[1] == f"{TOTAL / 2**30:.2f}"  # 1.65 GiB


def test_compare_puts_studio_beside_the_others(tiny):
    got = _cli_json("compare", tiny, "--profiles", "studio,hf", "--methods", "qlora", *FLAGS[2:], "--json")
    cols = {(c["profile"], c["method"]): c for c in got["cells"]}
    assert abs(cols[("studio", "qlora")]["total"] - TOTAL) <= 1
    assert ("hf", "qlora") in cols


def test_the_server_offers_studio_and_estimates_with_it():
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    from vramwise.surfaces import serve

    with TestClient(serve.create_app(), base_url="http://127.0.0.1:8000") as client:
        families = client.get("/api/families").json()
        r = client.post("/api/estimate", json={"config": TINY, "profile": "studio", **SETTINGS})
    assert "studio" in families["profiles"]
    assert families["profile_summaries"]["studio"].startswith("what Unsloth Studio's training-VRAM estimator says")
    assert r.status_code == 200
    assert r.json()["profile"] == "studio" and abs(r.json()["total"] - TOTAL) <= 1
