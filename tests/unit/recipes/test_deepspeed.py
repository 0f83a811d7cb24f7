"""DeepSpeed JSON recipes (frameworks/deepspeed.yaml): ZeRO stage, offload, micro batch, precision.

Fixtures: accelerate's examples/deepspeed_config_templates (JSON, verbatim: lines are the source's).
Defaults are DeepSpeed 0.19.8's, each with its source in a comment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import vramwise
from vramwise import RecipeError
from helpers import where

pytestmark = pytest.mark.unit

DS = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "deepspeed"



@pytest.mark.parametrize("name, strategy, offload, stage_line", [
    ("zero_stage1_config.json", "zero1", "none", 29),
    ("zero_stage2_config.json", "zero2", "none", 29),
    ("zero_stage2_offload_config.json", "zero2", "optimizer", 29),  # offload_optimizer.device cpu (line 31)
    ("zero_stage3_config.json", "zero3", "none", 27),
    ("zero_stage3_offload_config.json", "zero3", "parameters", 27),  # offload_param.device cpu (line 33)
])
def test_templates(name, strategy, offload, stage_line):
    r = vramwise.read_recipe(DS / name, overrides={"world_size": 8})
    assert r.format == "deepspeed" and r.framework == "deepspeed" and r.framework_version == "0.19.8"
    assert r.model is None and r.profile == "hf"
    assert r.settings["strategy"] == strategy
    assert where(r, "strategy") == ("recipe", "zero_optimization.stage", stage_line)
    assert r.settings["offload"] == offload
    if offload == "none":
        # offload_param / offload_optimizer default None (zero/config.py:164, 171)
        assert r.origins["offload"].kind == "framework default" and "zero/config.py:164" in r.origins["offload"].source
    # train_micro_batch_size_per_gpu: "auto" is skipped: vramwise's default batch
    assert r.origins["batch_size"].kind == "vramwise default"
    assert r.extras["gradient_accumulation_steps"] == 1
    assert r.extras["mixed_precision"] == "fp16"  # fp16.enabled: true (line 3)
    # optimizer AdamW: torch_adam true (stages 1, 2) -> torch.optim.AdamW; otherwise FusedAdam
    # (engine.py:2377-2409)
    assert r.settings["optimizer"] == ("adamw_torch" if "stage3" not in name else "adamw_torch_fused")
    assert not any("unknown deepspeed key" in w for w in r.warnings), r.warnings


def test_bucket_size_other_than_the_default_warns():
    r = vramwise.read_recipe(DS / "zero_stage1_config.json")
    # allgather_bucket_size: 2e8 (line 31); the zero formulas assume 5e8
    assert any("zero_stage1_config.json:31: zero_optimization.allgather_bucket_size" in w for w in r.warnings)
    assert any("on 1 GPU" in w for w in r.warnings)  # a DeepSpeed JSON does not say how many GPUs


def test_defaults_and_old_forms():
    r = vramwise.read_recipe({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True}}, framework="deepspeed")
    assert r.settings["strategy"] == "ddp"  # stage default 0 (zero/config.py:95)
    assert r.origins["strategy"].kind == "framework default" and "zero/config.py:95" in r.origins["strategy"].source
    assert r.settings["batch_size"] == 2 and r.extras["mixed_precision"] == "bf16"
    # zero_optimization: true is stage 1 (zero/config.py:60-62); cpu_offload the old offload_optimizer
    r = vramwise.read_recipe({"zero_optimization": True}, framework="deepspeed")
    assert r.settings["strategy"] == "zero1"
    r = vramwise.read_recipe({"zero_optimization": {"stage": 2, "cpu_offload": True}}, framework="deepspeed")
    assert r.settings["offload"] == "optimizer"
    # neither bf16 nor fp16: float32 training, named in a warning
    assert any("float32" in w for w in r.warnings)
    assert r.extras["mixed_precision"] == "no"


def test_unknown_stage_warns_and_unknown_key_warns():
    r = vramwise.read_recipe({"zero_optimization": {"stage": 4}, "fp16": {"enabled": "auto"}, "no_such": 1},
                             framework="deepspeed")
    assert any("zero_optimization.stage = '4'" in w for w in r.warnings)
    assert any("unknown deepspeed key 'no_such'" in w for w in r.warnings)


def test_wrong_type(tmp_path):
    p = tmp_path / "ds.json"
    p.write_text('{\n  "train_micro_batch_size_per_gpu": "four",\n  "zero_optimization": {"stage": 2}\n}\n')
    with pytest.raises(RecipeError, match=r"ds\.json:2: train_micro_batch_size_per_gpu: .*batch_size"):
        vramwise.read_recipe(p)


def test_write_back():
    r = vramwise.read_recipe(DS / "zero_stage2_config.json")
    changes = {"strategy": "zero3", "offload": "optimizer", "batch_size": 2, "gradient_accumulation_steps": 4}
    assert r.write(changes) == {
        "zero_optimization.stage": 3, "zero_optimization.offload_optimizer.device": "cpu",
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}
