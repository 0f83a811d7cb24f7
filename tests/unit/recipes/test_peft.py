"""PEFT adapter configs (frameworks/peft.yaml): adapter_config.json / LoraConfig.to_dict().

Fixtures: adapter_config.json files of the PEFT repository (verbatim JSON, so lines are the source's).
Defaults are PEFT 0.21.2's LoraConfig, each with its source in a comment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import vramwise
from vramwise import RecipeError
from helpers import where

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes"
PEFT = FIXTURES / "peft"



def test_rank10_mlp_adapter():
    r = vramwise.read_recipe(PEFT / "metamathqa_llama-3.2-3B-rank10-target-mlp.json")
    assert r.format == "peft" and r.framework == "peft" and r.framework_version == "0.21.2"
    assert r.profile == "hf"
    assert r.model is None  # base_model_name_or_path: null (line 4)
    s = r.settings
    assert s["method"] == "lora" and where(r, "method") == ("recipe", "peft_type", 22)  # "LORA"
    assert s["lora_rank"] == 10 and where(r, "lora_rank") == ("recipe", "r", 23)
    assert tuple(s["target_modules"]) == ("gate_proj", "up_proj", "down_proj")  # line 26
    assert where(r, "target_modules") == ("recipe", "target_modules", 26)
    assert s["lora_dropout"] == 0.0 and where(r, "lora_dropout") == ("recipe", "lora_dropout", 18)
    assert r.warnings == ()  # every other key is known (lora_alpha, task_type...: no memory effect)


def test_null_targets_warn():
    r = vramwise.read_recipe(PEFT / "metamathqa_llama-3.2-3B-rank64.json")
    assert r.settings["lora_rank"] == 64
    assert r.origins["target_modules"].kind == "vramwise default"
    assert any("rank64.json:26: target_modules = null" in w
               and "TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING" in w for w in r.warnings)


def test_docs_bert_adapter_names_its_base_model():
    r = vramwise.read_recipe(PEFT / "checkpoint_docs_bert.json")
    assert r.model == "bert-base-uncased" and where(r, "model") == ("recipe", "base_model_name_or_path", 7)
    assert r.settings["lora_rank"] == 8 and tuple(r.settings["target_modules"]) == ("query", "value")


def test_defaults_and_strings():
    # r default 8 (config.py:632), lora_dropout default 0.0 (config.py:653)
    r = vramwise.read_recipe({"peft_type": "LORA", "target_modules": "all-linear"})
    assert r.settings["lora_rank"] == 8 and r.origins["lora_rank"].kind == "framework default"
    assert "config.py:632" in r.origins["lora_rank"].source
    assert r.settings["lora_dropout"] == 0.0 and "config.py:653" in r.origins["lora_dropout"].source
    assert tuple(r.settings["target_modules"]) == ("all-linear",)
    # a regular expression is not expanded: vramwise's default, and a warning
    r = vramwise.read_recipe({"peft_type": "LORA", "r": 4, "target_modules": r".*\.(q_proj|v_proj)$"})
    assert r.origins["target_modules"].kind == "vramwise default"
    assert any("regular expression" in w for w in r.warnings)


def test_other_adapters_and_dora_warn():
    r = vramwise.read_recipe({"peft_type": "LORA", "r": 8, "use_dora": True, "modules_to_save": ["lm_head"]},
                             framework="peft")
    assert any("use_dora" in w and "not modelled" in w for w in r.warnings)
    assert any("modules_to_save" in w and "not modelled" in w for w in r.warnings)
    r = vramwise.read_recipe({"peft_type": "IA3", "target_modules": ["k_proj"]}, framework="peft")
    assert any("peft_type = IA3" in w and "only LoRA" in w for w in r.warnings)


def test_wrong_type(tmp_path):
    p = tmp_path / "adapter_config.json"
    p.write_text('{\n  "peft_type": "LORA",\n  "r": "sixteen"\n}\n')
    with pytest.raises(RecipeError, match=r"adapter_config\.json:3: r: .*lora_rank"):
        vramwise.read_recipe(p)


def test_unknown_key(tmp_path):
    p = tmp_path / "adapter_config.json"
    p.write_text('{\n  "peft_type": "LORA",\n  "r": 16,\n  "lora_sparkle": 2\n}\n')
    r = vramwise.read_recipe(p)
    assert any("adapter_config.json:4: unknown peft key 'lora_sparkle'" in w for w in r.warnings)


def test_completes_a_trl_recipe_and_writes_back():
    r = vramwise.read_recipe([FIXTURES / "transformers" / "trl_cli_example_config.yaml",
                              PEFT / "metamathqa_llama-3.2-3B-rank10-target-mlp.json"])
    # The TRL recipe says nothing about PEFT (its "full" is only a default): the adapter makes it LoRA
    assert r.settings["method"] == "lora" and r.settings["lora_rank"] == 10
    assert r.model == "Qwen/Qwen2.5-0.5B"
    assert r.write({"lora_rank": 4, "target_modules": ("q_proj", "v_proj")}) == {
        "lora_r": 4, "lora_target_modules": ["q_proj", "v_proj"]}
    alone = vramwise.read_recipe(PEFT / "metamathqa_llama-3.2-3B-rank10-target-mlp.json")
    assert alone.write({"lora_rank": 4, "target_modules": ("q_proj",)}) == {"r": 4, "target_modules": ["q_proj"]}
