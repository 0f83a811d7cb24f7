"""accelerate config YAML recipes (frameworks/accelerate.yaml): distributed type, processes, FSDP, DeepSpeed.

Fixtures: accelerate's examples/config_yaml_templates and trl 0.26.0's trl/accelerate_configs (first line
names the source, so a line below is the source's line plus one). Defaults are accelerate 1.16.0's, each
with its source in a comment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import vramwise
from vramwise import RecipeError
from helpers import where

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes"
ACC = FIXTURES / "accelerate"



def test_multi_node_template():
    r = vramwise.read_recipe(ACC / "config_yaml_templates" / "multi_node.yaml")
    assert r.format == "accelerate" and r.framework_version == "1.16.0" and r.profile == "hf"
    s = r.settings
    assert s["strategy"] == "ddp" and where(r, "strategy") == ("recipe", "distributed_type", 4)
    # num_processes: 8 (line 13) counts every machine's; num_machines: 2 (line 11)
    assert s["world_size"] == 8 and where(r, "world_size") == ("recipe", "num_processes", 13)
    assert s["gpus_per_node"] == 4  # 8 / 2
    assert r.extras["num_machines"] == 2
    assert not any("unknown" in w for w in r.warnings), r.warnings


def test_fsdp_template():
    r = vramwise.read_recipe(ACC / "config_yaml_templates" / "fsdp.yaml")
    s = r.settings
    assert s["strategy"] == "fsdp"  # fsdp_sharding_strategy: FULL_SHARD (line 16)
    assert where(r, "strategy") == ("recipe", "fsdp_config.fsdp_sharding_strategy", 16)
    assert s["offload"] == "none"  # fsdp_offload_params: false
    assert s["world_size"] == 2 and s["gpus_per_node"] == 2  # num_processes: 2, num_machines default 1
    assert r.origins["gpus_per_node"].kind == "framework default"  # config_args.py:182 num_machines 1
    assert r.extras["mixed_precision"] == "bf16" and r.extras["num_machines"] == 1
    assert r.warnings == ()


def test_deepspeed_template_reads_the_json_it_names():
    r = vramwise.read_recipe(ACC / "config_yaml_templates" / "deepspeed.yaml")
    # deepspeed_config_file: ../deepspeed_config_templates/zero_stage1_config.json (line 7)
    assert [f for f, _ in r.parts] == ["accelerate", "deepspeed"]
    assert r.settings["strategy"] == "zero1"
    assert r.origins["strategy"].file.endswith("zero_stage1_config.json") and r.origins["strategy"].line == 29
    assert r.settings["world_size"] == 2  # num_processes: 2 (line 14)
    assert r.extras["mixed_precision"] == "fp16"  # from the JSON (its fp16.enabled); the YAML leaves it


@pytest.mark.parametrize("name, strategy, world, line", [
    ("fsdp1.yaml", "fsdp", 8, 14),  # fsdp_reshard_after_forward: FULL_SHARD, fsdp_version 1
    ("fsdp2.yaml", "fsdp", 8, 13),  # fsdp_reshard_after_forward: true, fsdp_version 2
    ("multi_gpu.yaml", "ddp", 8, 4),
    ("zero1.yaml", "zero1", 8, 8),
    ("zero2.yaml", "zero2", 8, 9),
    ("zero3.yaml", "zero3", 8, 10),
    ("single_gpu.yaml", "none", 1, 4),  # distributed_type NO: one process (launch.py:1438-1440)
])
def test_trl_presets(name, strategy, world, line):
    r = vramwise.read_recipe(ACC / "trl" / name)
    assert r.settings["strategy"] == strategy and r.settings["world_size"] == world
    assert r.origins["strategy"].line == line
    assert r.settings["offload"] == "none"
    assert r.extras["mixed_precision"] == "bf16"
    assert not any("unknown" in w for w in r.warnings), r.warnings


def test_context_parallel_warns():
    r = vramwise.read_recipe(ACC / "trl" / "context_parallel_2gpu.yaml")
    assert r.settings["strategy"] == "fsdp" and r.settings["world_size"] == 2
    assert r.settings["gradient_checkpointing"] == "true"  # fsdp_activation_checkpointing: true (line 8)
    assert any("context_parallel_2gpu.yaml:31: parallelism_config.parallelism_config_cp_size = 2" in w
               for w in r.warnings)


def test_defaults_and_numbers():
    # DEEPSPEED with no stage and no file: zero_stage default 2 (dataclasses.py:1142-1143)
    r = vramwise.read_recipe({"distributed_type": "DEEPSPEED", "num_processes": 4})
    assert r.settings["strategy"] == "zero2" and r.origins["strategy"].kind == "framework default"
    assert "dataclasses.py:1142" in r.origins["strategy"].source
    # old files give the sharding strategy as its 1-based number in FSDP_SHARDING_STRATEGY (constants.py:38)
    r = vramwise.read_recipe({"distributed_type": "FSDP", "num_processes": 16, "num_machines": 2,
                              "fsdp_config": {"fsdp_sharding_strategy": 4, "fsdp_offload_params": True}})
    assert r.settings["strategy"] == "fsdp_hybrid" and r.settings["offload"] == "parameters"
    assert r.settings["gpus_per_node"] == 8
    r = vramwise.read_recipe({"distributed_type": "DEEPSPEED", "num_processes": 2,
                              "deepspeed_config": {"zero_stage": 3, "offload_optimizer_device": "cpu",
                                                   "offload_param_device": "nvme"}})
    assert r.settings["strategy"] == "zero3" and r.settings["offload"] == "parameters"


def test_processes_not_divisible_by_machines_fails(tmp_path):
    p = tmp_path / "acc.yaml"
    p.write_text("distributed_type: MULTI_GPU\nnum_machines: 3\nnum_processes: 8\n")
    with pytest.raises(RecipeError, match=r"acc\.yaml:3: num_processes \(8\) is not a multiple of num_machines"):
        vramwise.read_recipe(p)


def test_wrong_type_and_unknown_key(tmp_path):
    p = tmp_path / "acc.yaml"
    p.write_text("distributed_type: MULTI_GPU\nnum_processes: many\n")
    with pytest.raises(RecipeError, match=r"acc\.yaml:2: num_processes: .*world_size"):
        vramwise.read_recipe(p)
    p.write_text("distributed_type: MULTI_GPU\nnum_processes: 2\nfrobnicate: 1\n")
    r = vramwise.read_recipe(p)
    assert any("acc.yaml:3: unknown accelerate key 'frobnicate'" in w for w in r.warnings)


def test_with_a_trl_recipe_and_write_back():
    r = vramwise.read_recipe([FIXTURES / "transformers" / "trl_skill_sft_config.yaml", ACC / "trl" / "zero3.yaml"])
    assert r.settings["method"] == "lora" and r.settings["strategy"] == "zero3" and r.settings["world_size"] == 8
    assert r.write({"world_size": 16, "strategy": "zero2"}) == {
        "num_processes": 16, "distributed_type": "DEEPSPEED", "deepspeed_config.zero_stage": 2}
