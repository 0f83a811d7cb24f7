"""transformers TrainingArguments / TRL SFTConfig + ModelConfig recipes (frameworks/transformers.yaml).

Fixtures: TRL's own example configs (first line names the source, so a line below is the source's line
plus one) and configs saved by the installed transformers 5.24.0 / trl 0.26.0 (to_json_string(), see
tests/fixtures/recipes/transformers/README.md). Expected values are read off the files by hand; each
default is the framework's, with its source line in a comment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vramwise
from vramwise import RecipeError
from helpers import where

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes"
TF = FIXTURES / "transformers"
#: The TRL release these fixtures were written by (and the defaults below read from); a recipe read without a
#: release named is read under the newest the format knows (tests/unit/recipes/test_transformers_releases.py)
PINNED = "transformers@0.26.0"



def write(tmp_path: Path, text: str, name: str = "sft.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- TRL command-line YAML ----------------------------------------------------------------------

def test_trl_skill_config_lora_settings_and_origins():
    r = vramwise.read_recipe(TF / "trl_skill_sft_config.yaml", framework=PINNED)
    assert r.format == "transformers" and r.framework == "TRL" and r.framework_version == "0.26.0"
    assert r.model == "Qwen/Qwen2.5-0.5B"  # model_name_or_path (line 2)
    assert r.profile == "hf"
    s = r.settings
    assert s["method"] == "lora"  # use_peft: true (line 9)
    assert s["batch_size"] == 8  # per_device_train_batch_size: 8 (line 6)
    assert s["lora_rank"] == 16  # lora_r: 16 (line 10)
    assert r.extras["gradient_accumulation_steps"] == 2  # line 7
    assert where(r, "method") == ("recipe", "use_peft", 9)
    assert where(r, "batch_size") == ("recipe", "per_device_train_batch_size", 6)
    assert where(r, "lora_rank") == ("recipe", "lora_r", 10)
    assert where(r, "gradient_accumulation_steps") == ("recipe", "gradient_accumulation_steps", 7)
    # TRL's defaults (trl 0.26.0): max_length 1024 (sft_config.py:194), gradient_checkpointing True
    # (sft_config.py:118), lora_dropout 0.05 (model_config.py:126); transformers' optim adamw_torch_fused with
    # torch >= 2.8 (training_args.py:806-815); attn_implementation None -> sdpa (modeling_utils.py:1856)
    assert s["seq_len"] == 1024
    assert s["gradient_checkpointing"] == "true"
    assert s["lora_dropout"] == 0.05
    assert s["optimizer"] == "adamw_torch_fused"
    assert s["attention"] == "sdpa"
    assert s["load_in_4bit"] is None  # not set: follows the method (a 16-bit base for lora)
    assert s["strategy"] == "none" and s["world_size"] == 1
    for name, source in (("seq_len", "sft_config.py:194"), ("gradient_checkpointing", "sft_config.py:118"),
                         ("lora_dropout", "model_config.py:126"), ("optimizer", "training_args.py:806"),
                         ("attention", "modeling_utils.py:1855")):
        o = r.origins[name]
        assert o.kind == "framework default" and source in o.source, (name, o)
        assert o.framework == "TRL" and o.version == "0.26.0"
    # no lora_target_modules: PEFT's per-model defaults are not vramwise's, said in a warning
    assert any("lora_target_modules" in w and "TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING" in w
               for w in r.warnings)
    assert not any("unknown transformers key" in w for w in r.warnings)


def test_trl_cli_example_config_full_fine_tuning_by_default():
    r = vramwise.read_recipe(TF / "trl_cli_example_config.yaml", framework=PINNED)
    assert r.model == "Qwen/Qwen2.5-0.5B"  # lines 9-10
    # use_peft default False (model_config.py:114): every parameter is trained
    assert r.settings["method"] == "full"
    assert r.origins["method"].kind == "framework default" and "model_config.py:114" in r.origins["method"].source
    assert r.settings["batch_size"] == 8  # per_device_train_batch_size default 8 (training_args.py:777)
    assert "training_args.py:777" in r.origins["batch_size"].source
    assert r.settings["seq_len"] == 1024  # sft_config.py:194
    assert r.extras["gradient_accumulation_steps"] == 1  # training_args.py:849
    assert r.extras["mixed_precision"] == "bf16"  # SFTConfig bf16 None -> not fp16 (sft_config.py:124, 277)
    assert r.warnings == ()  # report_to, learning_rate, lr_scheduler_type, dataset_name: known, no memory effect


def test_trl_cli_num_processes_is_ddp():
    r = vramwise.read_recipe(TF / "trl_clis_num_processes.yaml")
    # num_processes: 4 (line 5) goes to accelerate launch, which runs DDP with more than one process
    assert r.settings["strategy"] == "ddp" and r.settings["world_size"] == 4
    assert where(r, "world_size") == ("recipe", "num_processes", 5)
    assert where(r, "strategy") == ("recipe", "num_processes", 5)


def test_trl_cli_accelerate_preset():
    r = vramwise.read_recipe(TF / "trl_clis_accelerate_config.yaml")
    # accelerate_config: zero2 (line 5) -> trl/accelerate_configs/zero2.yaml: ZeRO-2, 8 processes
    assert r.settings["strategy"] == "zero2"
    assert where(r, "strategy") == ("recipe", "accelerate_config", 5)
    assert r.settings["world_size"] == 8
    assert r.origins["world_size"].kind == "framework default"
    assert "accelerate_configs" in r.origins["world_size"].source


def test_accelerate_config_path_is_named_not_read(tmp_path):
    p = write(tmp_path, "model_name_or_path: Qwen/Qwen2.5-0.5B\naccelerate_config: my/fsdp.yaml\n")
    r = vramwise.read_recipe(p)
    assert r.settings["strategy"] == "none"  # a path is not a preset: vramwise's default
    assert any("sft.yaml:2: accelerate_config" in w and "further recipe part" in w for w in r.warnings)


def test_qlora_from_model_config_keys(tmp_path):
    p = write(tmp_path, "\n".join([
        "model_name_or_path: meta-llama/Llama-3.1-8B",  # 1
        "use_peft: true",  # 2
        "load_in_4bit: true",  # 3
        "lora_r: 64",  # 4
        "lora_dropout: 0.1",  # 5
        "lora_target_modules: all-linear",  # 6
        "max_length: 4096",  # 7
        "per_device_train_batch_size: 2",  # 8
        "gradient_checkpointing: false",  # 9
        "optim: paged_adamw_8bit",  # 10
        "attn_implementation: kernels-community/flash-attn2",  # 11
        "use_liger_kernel: true",  # 12
        "packing: true",  # 13
        "neftune_noise_alpha: 5",  # 14
        "",
    ]))
    r = vramwise.read_recipe(p)
    s = r.settings
    assert s["method"] == "qlora" and s["load_in_4bit"] is True
    assert where(r, "method") == ("recipe", "load_in_4bit", 3)
    assert s["lora_rank"] == 64 and s["lora_dropout"] == 0.1
    assert tuple(s["target_modules"]) == ("all-linear",)
    assert s["seq_len"] == 4096 and where(r, "seq_len") == ("recipe", "max_length", 7)
    assert s["batch_size"] == 2
    assert s["gradient_checkpointing"] == "none"
    assert where(r, "gradient_checkpointing") == ("recipe", "gradient_checkpointing", 9)
    assert s["optimizer"] == "paged_adamw_8bit"
    assert s["attention"] == "flash_attention_2"  # the kernels-community FlashAttention-2 build
    # use_liger_kernel: Liger's fused linear cross-entropy is on by default (liger monkey_patch
    # fused_linear_cross_entropy=True); its other kernels are named in a warning
    assert s["loss"] == "fused" and where(r, "loss") == ("recipe", "use_liger_kernel", 12)
    for line, key in ((12, "use_liger_kernel"), (13, "packing"), (14, "neftune_noise_alpha")):
        assert any(f"sft.yaml:{line}: {key}" in w and "not modelled" in w for w in r.warnings), key
    assert not any("unknown" in w for w in r.warnings)


def test_liger_without_its_fused_loss(tmp_path):
    p = write(tmp_path, "model_name_or_path: m\nuse_liger_kernel: true\n"
                        "liger_kernel_config:\n  fused_linear_cross_entropy: false\n  rms_norm: true\n")
    r = vramwise.read_recipe(p, framework=PINNED)  # from TRL 1.15.0 SFTTrainer's own fused LM head computes it
    assert r.settings["loss"] == "standard"


def test_max_length_null_means_no_truncation(tmp_path):
    p = write(tmp_path, "model_name_or_path: m\nmax_length: null\n")
    r = vramwise.read_recipe(p)
    # no value from the recipe and no TRL default (max_length was given): vramwise's default, with a warning
    assert r.origins["seq_len"].kind == "vramwise default"
    assert any("sft.yaml:2: max_length" in w and "no truncation" in w for w in r.warnings)


def test_older_trl_max_seq_length(tmp_path):
    r = vramwise.read_recipe(write(tmp_path, "model_name_or_path: m\nmax_seq_length: 512\n"))
    assert r.settings["seq_len"] == 512 and where(r, "seq_len") == ("recipe", "max_seq_length", 2)


# -- saved TrainingArguments / SFTConfig ------------------------------------------------------------

def test_saved_sftconfig():
    r = vramwise.read_recipe(TF / "sftconfig_saved.json", framework=PINNED)
    assert r.format == "transformers" and r.model is None  # SFTConfig names no model
    s = r.settings
    assert s["batch_size"] == 4 and where(r, "batch_size") == ("recipe", "per_device_train_batch_size", 3)
    assert s["optimizer"] == "paged_adamw_8bit" and where(r, "optimizer") == ("recipe", "optim", 10)
    assert s["seq_len"] == 2048 and where(r, "seq_len") == ("recipe", "max_length", 130)
    # activation_checkpointing (line 26) is the 5.x name; SFTConfig's True default was resolved into it
    assert s["gradient_checkpointing"] == "true"
    assert where(r, "gradient_checkpointing") == ("recipe", "activation_checkpointing", 26)
    assert s["method"] == "full"  # no PEFT config in an SFTConfig: the Trainer's default
    assert s["loss"] == "standard" and s["compile"] is False and s["activation_offloading"] is False
    assert r.extras["gradient_accumulation_steps"] == 4  # line 17
    assert r.extras["mixed_precision"] == "no"  # bf16: false, fp16: false (saved on a machine without a GPU)
    assert not any("unknown" in w for w in r.warnings), r.warnings
    assert r.warnings == ()


def test_saved_training_arguments_with_fsdp():
    r = vramwise.read_recipe(TF / "trainingarguments_fsdp_saved.json")
    s = r.settings
    # fsdp="shard_grad_op auto_wrap offload" saved as fsdp: true (line 113) with fsdp_config
    # reshard_after_forward: false (line 118) and cpu_offload: true (line 119)
    assert s["strategy"] == "fsdp_shard_grad_op"
    assert where(r, "strategy") == ("recipe", "fsdp_config.reshard_after_forward", 118)
    assert s["offload"] == "parameters" and where(r, "offload") == ("recipe", "fsdp_config.cpu_offload", 119)
    assert s["compile"] is True and where(r, "compile") == ("recipe", "torch_compile", 30)
    assert s["gradient_checkpointing"] == "true"
    assert s["batch_size"] == 2
    assert s["optimizer"] == "adamw_torch_fused"  # saved default (training_args.py:806-815), line 10
    assert where(r, "optimizer") == ("recipe", "optim", 10)
    # no seq_len in TrainingArguments: vramwise's default
    assert r.origins["seq_len"].kind == "vramwise default"
    assert any("on 1 GPU" in w for w in r.warnings)  # the number of processes is not in TrainingArguments


@pytest.mark.parametrize("fsdp, expected", [
    ("full_shard auto_wrap", "fsdp"),
    ("shard_grad_op", "fsdp_shard_grad_op"),
    ("hybrid_shard", "fsdp_hybrid"),
    (True, "fsdp"),  # FSDP2 reshard_after_forward default True (training_args.py:2859-2861)
])
def test_fsdp_legacy_strings(fsdp, expected):
    r = vramwise.read_recipe({"per_device_train_batch_size": 1, "fsdp": fsdp, "output_dir": "o"},
                             overrides={"world_size": 2})
    assert r.settings["strategy"] == expected
    assert r.settings["offload"] == "none"


def test_fsdp_offload_string_and_prefixed_fsdp_config():
    r = vramwise.read_recipe({"output_dir": "o", "fsdp": "full_shard offload"}, framework="trl")
    assert r.settings["strategy"] == "fsdp" and r.settings["offload"] == "parameters"
    r = vramwise.read_recipe({"output_dir": "o", "fsdp": True,
                              "fsdp_config": {"fsdp_reshard_after_forward": False, "fsdp_cpu_offload": True,
                                              "fsdp_activation_checkpointing": True}}, framework="transformers")
    assert r.settings["strategy"] == "fsdp_shard_grad_op" and r.settings["offload"] == "parameters"
    assert r.settings["gradient_checkpointing"] == "true"  # FSDP's own checkpointing (training_args.py:2854)


def test_activation_checkpointing_kwargs_offload(tmp_path):
    r = vramwise.read_recipe({"output_dir": "o", "activation_checkpointing": True,
                              "activation_checkpointing_kwargs": {"offload": True, "every_n_layers": 2}},
                             framework="transformers")
    assert r.settings["activation_offloading"] is True
    assert any("every_n_layers" in w and "not modelled" in w for w in r.warnings)


def test_deepspeed_reference_relative_to_the_recipe(tmp_path):
    ds = FIXTURES / "deepspeed" / "zero_stage3_offload_config.json"
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "z3.json").write_text(ds.read_text())
    p = write(tmp_path, "model_name_or_path: m\nper_device_train_batch_size: 1\ndeepspeed: ds/z3.json\n")
    r = vramwise.read_recipe(p)
    assert [f for f, _ in r.parts] == ["transformers", "deepspeed"]
    assert r.settings["strategy"] == "zero3" and r.settings["offload"] == "parameters"
    assert r.origins["strategy"].file.endswith("z3.json") and r.origins["strategy"].line == 27
    assert r.settings["batch_size"] == 1  # the recipe's key; the JSON's "auto" is skipped


def test_deepspeed_inline_mapping():
    r = vramwise.read_recipe({"output_dir": "o", "deepspeed": {"zero_optimization": {"stage": 2}}},
                             framework="transformers", overrides={"world_size": 4})
    assert r.settings["strategy"] == "zero2"


def test_missing_deepspeed_file_names_file_line_and_key(tmp_path):
    p = write(tmp_path, "model_name_or_path: m\ndeepspeed: nowhere.json\n")
    with pytest.raises(RecipeError, match=r"sft\.yaml:2: deepspeed: .*nowhere\.json.* does not exist"):
        vramwise.read_recipe(p)


def test_wrong_type_names_file_line_and_key(tmp_path):
    p = write(tmp_path, "model_name_or_path: m\nper_device_train_batch_size: eight\n")
    with pytest.raises(RecipeError, match=r"sft\.yaml:2: per_device_train_batch_size: .*batch_size"):
        vramwise.read_recipe(p)


def test_unknown_key_warns(tmp_path):
    p = write(tmp_path, "model_name_or_path: m\nper_device_train_batch_size: 2\nno_such_argument: 3\n")
    r = vramwise.read_recipe(p)
    assert r.settings["batch_size"] == 2
    assert any("sft.yaml:3: unknown transformers key 'no_such_argument'" in w for w in r.warnings)


def test_trl_with_adapter_config_and_bitsandbytes_parts():
    # A saved SFTConfig with the LoraConfig and BitsAndBytesConfig that SFTTrainer was given.
    r = vramwise.read_recipe([TF / "sftconfig_saved.json",
                              FIXTURES / "peft" / "metamathqa_llama-3.2-3B-rank10-target-mlp.json",
                              FIXTURES / "bitsandbytes" / "bnb_nf4_double_quant.json"])
    assert [f for f, _ in r.parts] == ["transformers", "peft", "bitsandbytes"]
    s = r.settings
    # the adapter's peft_type (LoRA) on the 4-bit base of the bitsandbytes part: LoRA on a 4-bit base is QLoRA,
    # placed where the 4-bit base comes from
    assert s["method"] == "qlora" and s["load_in_4bit"] is True
    assert r.origins["method"] == r.origins["load_in_4bit"]
    assert s["lora_rank"] == 10 and tuple(s["target_modules"]) == ("gate_proj", "up_proj", "down_proj")
    assert s["batch_size"] == 4 and s["seq_len"] == 2048


def test_write_back_in_trl_keys():
    r = vramwise.read_recipe(TF / "trl_skill_sft_config.yaml")
    out = r.write({"batch_size": 2, "gradient_accumulation_steps": 8, "gradient_checkpointing": "true",
                   "optimizer": "paged_adamw_8bit", "method": "qlora", "seq_len": 512, "lora_rank": 8})
    assert out == {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 8,
                   "activation_checkpointing": True, "gradient_checkpointing": True, "optim": "paged_adamw_8bit",
                   "use_peft": True, "load_in_4bit": True, "max_length": 512, "lora_r": 8}


def test_saved_json_round_trips_as_a_mapping():
    data = json.loads((TF / "sftconfig_saved.json").read_text())
    r = vramwise.read_recipe(data)
    assert r.format == "transformers" and r.settings["batch_size"] == 4 and r.origins["batch_size"].line is None
