"""The PEFT adapter format against PEFT's own LoraConfig, field by field.

Each adapter_config.json fixture is loaded by peft.LoraConfig (PeftConfig.from_json_file and the
dataclass) and compared with what vramwise read; LoraConfig.to_dict() of configs built by PEFT itself is
read as a mapping (its peft_type an enum, its target_modules a set).
"""

import dataclasses
from pathlib import Path

import pytest

from helpers import require_installed

require_installed("peft")  # imported by the tests: it imports transformers' models, seconds of every collection

import vramwise  # noqa: E402
from vramwise.recipes.reader import bundled_formats  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "peft"
NAMES = sorted(p.name for p in FIXTURES.glob("*.json"))


def lora_config(path: Path):
    from peft import LoraConfig

    data = LoraConfig.from_json_file(str(path))
    fields = {f.name for f in dataclasses.fields(LoraConfig) if f.init}
    return LoraConfig(**{k: v for k, v in data.items() if k in fields})


def compare(recipe, cfg):
    s = recipe.settings
    assert s["method"] == "lora"
    assert s["lora_rank"] == cfg.r
    assert s["lora_dropout"] == cfg.lora_dropout
    if cfg.target_modules is None:
        assert recipe.origins["target_modules"].kind == "vramwise default"
    elif isinstance(cfg.target_modules, str):
        assert tuple(s["target_modules"]) == (cfg.target_modules,)
    else:
        assert set(s["target_modules"]) == set(cfg.target_modules)
    assert recipe.model == cfg.base_model_name_or_path


@pytest.mark.parametrize("name", NAMES)
def test_adapter_config_against_lora_config(name):
    cfg = lora_config(FIXTURES / name)
    compare(vramwise.read_recipe(FIXTURES / name), cfg)


@pytest.mark.parametrize("kwargs", [
    dict(r=32, lora_alpha=64, lora_dropout=0.1, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
    dict(r=4, target_modules="all-linear"),
    dict(r=128, target_modules=["gate_proj"], base_model_name_or_path="Qwen/Qwen3-8B"),
])
def test_lora_config_to_dict(kwargs):
    from peft import LoraConfig

    cfg = LoraConfig(**kwargs)
    r = vramwise.read_recipe(cfg.to_dict())
    assert r.format == "peft"
    compare(r, cfg)
    assert not any("unknown" in w for w in r.warnings), r.warnings


def test_every_lora_config_field_is_known():
    from peft import LoraConfig

    known = bundled_formats().get("peft").known_keys()
    fields = {f.name for f in dataclasses.fields(LoraConfig) if f.init}
    assert sorted(fields - known) == []
