"""--recipe, --framework and --set on the command line: the recipe's settings, the flags given over
them, the origins in the output, and one-line errors.

The expected settings are read off examples/recipes/axolotl-qlora.yaml by hand:
base_model meta-llama/Llama-3.1-8B (line 2), adapter qlora (line 4) -> qlora, lora_r 16 (line 5),
lora_target_linear true (line 8) -> all-linear, sequence_len 4096 (line 15), micro_batch_size 4 (line 16),
gradient_accumulation_steps 4, optimizer paged_adamw_8bit (line 19), gradient_checkpointing true
(line 22), flash_attention true (line 23) -> flash_attention_2; axolotl's profile is hf.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vramwise
from vramwise.surfaces.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
AXOLOTL = str(ROOT / "examples" / "recipes" / "axolotl-qlora.yaml")
HAND = dict(method="qlora", batch_size=4, seq_len=4096, lora_rank=16, target_modules="all-linear",
            gradient_checkpointing="true", optimizer="paged_adamw_8bit", attention="flash_attention_2")
MODEL = "meta-llama/Llama-3.1-8B"
SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


def _json(args, capsys) -> dict:
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_from_a_recipe_equals_the_hand_read_settings(capsys):
    data = _json(["estimate", "--recipe", AXOLOTL, "--json"], capsys)
    e = vramwise.estimate(MODEL, profile="hf", **HAND)
    assert data["total"] == e.total and data["profile"] == "hf"
    assert data["recipe"]["format"] == "axolotl" and data["recipe"]["model"] == MODEL
    assert data["recipe"]["origins"]["batch_size"]["line"] == 16
    assert data["recipe"]["origins"]["batch_size"]["key"] == "micro_batch_size"
    assert data["recipe"]["extras"]["gradient_accumulation_steps"] == 4


def test_flags_and_set_override_the_recipe(capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(SMALL))
    data = _json(["estimate", str(cfg), "--recipe", AXOLOTL, "--batch-size", "1", "--set", "seq_len=512",
                  "--profile", "unsloth", "--json"], capsys)
    # the recipe's lora_dropout (0.05) too: the unsloth profile reads it (Unsloth's fused LoRA kernels need 0)
    e = vramwise.estimate(SMALL, profile="unsloth", **{**HAND, "batch_size": 1, "seq_len": 512, "lora_dropout": 0.05})
    assert data["total"] == e.total and data["profile"] == "unsloth"
    origins = data["recipe"]["origins"]
    assert origins["batch_size"]["kind"] == "override" and origins["seq_len"]["kind"] == "override"
    assert origins["model"]["kind"] == "override" and origins["lora_rank"]["kind"] == "recipe"


def test_table_lists_what_the_recipe_set(capsys):
    assert main(["estimate", "--recipe", AXOLOTL]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"recipe: axolotl {AXOLOTL}")
    assert f"{AXOLOTL}:16 micro_batch_size" in out and f"{AXOLOTL}:5 lora_r" in out
    # explain lists every setting, the defaults with theirs
    assert main(["explain", "--recipe", AXOLOTL]) == 0
    out = capsys.readouterr().out
    assert "vramwise default" in out and f"{AXOLOTL}:19 optimizer" in out


def test_fit_compare_sweep_select_take_a_recipe(capsys):
    f = _json(["fit", "--recipe", AXOLOTL, "--gpu", "RTX 4090", "--json"], capsys)
    direct = vramwise.fit(MODEL, gpu="RTX 4090", profile="hf", **HAND)
    assert f["per_gpu"] == direct.estimate.min_per_gpu(1) and f["fits"] == direct.fits
    if not f["fits"]:  # advice in axolotl's keys: micro_batch_size, not batch_size
        assert f["advice"] and any("micro_batch_size" in (a["recipe_changes"] or {}) for a in f["advice"])
    c = _json(["compare", "--recipe", AXOLOTL, "--methods", "lora,qlora", "--json"], capsys)
    assert [cell["profile"] for cell in c["cells"]] == ["hf", "hf"]
    s = _json(["sweep", "--recipe", AXOLOTL, "--batch-size", "1,2", "--json"], capsys)
    totals = [row["total"] for row in s["rows"]]
    assert totals == [vramwise.estimate(MODEL, profile="hf", **{**HAND, "batch_size": b}).total for b in (1, 2)]


@pytest.mark.parametrize("args, message", [
    (["estimate", "--recipe", "no-such-recipe.yaml"], "no-such-recipe.yaml: no such file"),
    (["estimate", "--recipe", AXOLOTL, "--set", "batchsize=2"], "unknown override(s) batchsize"),
    (["estimate", "--recipe", AXOLOTL, "--set", "seq_len"], "expected KEY=VALUE"),
    (["estimate", "--recipe", AXOLOTL, "--batch-size", "2", "--set", "batch_size=3"], "both given"),
    (["estimate", MODEL, "--set", "seq_len=2"], "--set and --framework apply to a recipe"),
    (["estimate", "--recipe", AXOLOTL, "--params", "8B"], "either --recipe or --params"),
    (["estimate", "--recipe", AXOLOTL, "--framework", "nope"], "unknown recipe format 'nope'"),
])
def test_errors_are_one_line(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_wrong_type_names_file_line_and_key(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(AXOLOTL).read_text().replace("micro_batch_size: 4", "micro_batch_size: four"))
    assert main(["estimate", "--recipe", str(bad)]) == 2
    assert f"{bad}:16: micro_batch_size: batch_size must be a positive integer" in capsys.readouterr().err
