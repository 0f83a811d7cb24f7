"""bitsandbytes quantization configs (frameworks/bitsandbytes.yaml): BitsAndBytesConfig or config.json's
quantization_config. Fixtures written by transformers 5.24.0's BitsAndBytesConfig.to_json_string()
(tests/fixtures/recipes/bitsandbytes/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

import vramwise
from helpers import where

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes"
BNB = FIXTURES / "bitsandbytes"



def test_nf4_is_qlora():
    r = vramwise.read_recipe(BNB / "bnb_nf4_double_quant.json")
    assert r.format == "bitsandbytes" and r.profile == "hf"
    assert r.settings["method"] == "qlora" and r.settings["load_in_4bit"] is True
    assert where(r, "load_in_4bit") == ("recipe", "load_in_4bit", 6)  # "load_in_4bit": true (line 6)
    assert where(r, "method") == ("recipe", "load_in_4bit", 6)
    # double quantization (line 5) is a fact of pre-quantized models in vramwise: named in a warning
    assert any("bnb_nf4_double_quant.json:5: bnb_4bit_use_double_quant" in w for w in r.warnings)
    assert not any("unknown" in w for w in r.warnings)


def test_8bit_warns():
    r = vramwise.read_recipe(BNB / "bnb_8bit.json")
    assert r.settings["load_in_4bit"] is None and r.origins["method"].kind == "vramwise default"
    assert any("bnb_8bit.json:3: load_in_8bit = true" in w and "not modelled" in w for w in r.warnings)


def test_config_json_quantization_config():
    cfg = {"_name_or_path": "unsloth/llama-3-8b-bnb-4bit",
           "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
                                   "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "bfloat16"}}
    r = vramwise.read_recipe(cfg)
    assert r.format == "bitsandbytes" and r.settings["method"] == "qlora"
    assert r.model == "unsloth/llama-3-8b-bnb-4bit"


def test_with_a_trl_recipe_and_an_adapter():
    r = vramwise.read_recipe([FIXTURES / "transformers" / "trl_cli_example_config.yaml",
                              BNB / "bnb_nf4_double_quant.json"])
    # TRL's "full" is a default; the 4-bit config's qlora comes from a key and wins
    assert r.settings["method"] == "qlora" and r.settings["load_in_4bit"] is True
