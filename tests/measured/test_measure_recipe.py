"""vramwise measure --recipe: the recipe's settings reach the measured step (fake tensors: a second or two).

examples/recipes/llama-factory-lora.yaml, read by hand: finetuning_type lora, lora_rank 8, lora_target all
(every linear layer: all-linear), per_device_train_batch_size 2; LLaMA-Factory leaves checkpointing on
(disable_gradient_checkpointing false) and transformers' optim default is adamw_torch_fused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from vramwise.surfaces.cli.main import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


def test_measure_runs_the_recipes_settings(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    recipe = str(ROOT / "examples" / "recipes" / "llama-factory-lora.yaml")
    assert main(["measure", "--recipe", recipe, "--set", f"model={cfg}", "--set", "seq_len=64", "--fake", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ran = data["settings"]
    assert (ran["method"], ran["batch_size"], ran["seq_len"], ran["lora_rank"]) == ("lora", 2, 64, 8)
    assert ran["target_modules"] == ["all-linear"] and ran["gradient_checkpointing"] == "true"
    assert ran["optimizer"] == "adamw_torch_fused"
    assert data["recipe"]["format"] == "llama_factory"
    # a flag given on the command line wins over the recipe
    assert main(["measure", "--recipe", recipe, "--set", f"model={cfg}", "--seq-len", "32", "--batch-size", "1",
                 "--fake", "--json"]) == 0
    ran = json.loads(capsys.readouterr().out)["settings"]
    assert (ran["batch_size"], ran["seq_len"]) == (1, 32)
