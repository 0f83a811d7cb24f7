"""Every ``map:``, ``divide_by`` and ``multiply_by`` rule of the recipe formats (frameworks/*.yaml), and
DeepSpeed's ``wins`` rule on real parts.

The expected values are written here from what each framework's key means (the sources in the comments;
the formats cite the same lines), not read from the format files: a recipe holding one key is read, and
the setting must be the framework's meaning of that key. The last tests check that the cases cover every
mapped value of every rule of the files, so a rule or a mapped value added without a case fails too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import vramwise
from vramwise.recipes.formats import canon
from vramwise.recipes.reader import bundled_formats

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes"

ATTN = {  # transformers' attn_implementation values; the kernels hub's flash-attention builds are FA2/FA3
    "eager": "eager", "sdpa": "sdpa", "flash_attention_2": "flash_attention_2",
    "flash_attention_3": "flash_attention_3", "flex_attention": "flex_attention",
    "kernels-community/flash-attn2": "flash_attention_2", "kernels-community/flash-attn3": "flash_attention_3",
    "kernels-community/vllm-flash-attn3": "flash_attention_3"}
BOOL = {True: True, False: False}
CHECKPOINTING = {True: "true", False: "none"}
# torch's ShardingStrategy (torch/distributed/fsdp/api.py): FULL_SHARD 1, SHARD_GRAD_OP 2, NO_SHARD 3 (no
# sharding: DDP), HYBRID_SHARD 4 (full shard within a node, replicas across nodes)
SHARDING = {"FULL_SHARD": "fsdp", 1: "fsdp", "SHARD_GRAD_OP": "fsdp_shard_grad_op", 2: "fsdp_shard_grad_op",
            "NO_SHARD": "ddp", 3: "ddp", "HYBRID_SHARD": "fsdp_hybrid", 4: "fsdp_hybrid"}
ZERO = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}  # ZeRO stage 0 is plain data parallelism
LITGPT_OPTIMIZERS = {  # litgpt's optimizer: a torch.optim or bitsandbytes class, by short or full name
    "AdamW": "adamw_torch", "torch.optim.AdamW": "adamw_torch", "Adam": "adam", "torch.optim.Adam": "adam",
    "SGD": "sgd", "torch.optim.SGD": "sgd", "bitsandbytes.optim.AdamW8bit": "adamw_8bit",
    "bitsandbytes.optim.PagedAdamW8bit": "paged_adamw_8bit", "bitsandbytes.optim.PagedAdamW": "paged_adamw_32bit",
    "bitsandbytes.optim.PagedAdamW32bit": "paged_adamw_32bit"}
DS_ADAM = ("Adam", "AdamW", "adam", "adamw")  # DeepSpeed lowercases the type (runtime/config.py:519-520)

#: (format, group, name, recipe key) -> (the other keys the rule's conditions need, {raw value: expected} or
#: (raw value, expected) pairs)
MAPS = {
    ("accelerate", "settings", "strategy", "deepspeed_config.zero_stage"): ({"distributed_type": "DEEPSPEED"}, ZERO),
    ("accelerate", "settings", "strategy", "fsdp_config.fsdp_sharding_strategy"): ({"distributed_type": "FSDP"}, SHARDING),
    # FSDP2's reshard_after_forward: true shards the parameters again after the forward (full shard), false
    # keeps them gathered (SHARD_GRAD_OP); accelerate also takes FSDP1's strategy names there
    # (pairs, not a dict: True and 1 are one key of a dict)
    ("accelerate", "settings", "strategy", "fsdp_config.fsdp_reshard_after_forward"): (
        {"distributed_type": "FSDP"}, [(True, "fsdp"), (False, "fsdp_shard_grad_op"), *SHARDING.items()]),
    ("axolotl", "settings", "method", "adapter"): ({}, {"lora": "lora", "qlora": "qlora"}),
    ("axolotl", "settings", "load_in_4bit", "load_in_4bit"): ({"adapter": "qlora"}, BOOL),
    # axolotl's offload modes checkpoint too, keeping the checkpoints in host memory or on disk
    ("axolotl", "settings", "gradient_checkpointing", "gradient_checkpointing"): (
        {}, {True: "true", False: "none", "offload": "true", "offload_disk": "true"}),
    ("axolotl", "settings", "activation_offloading", "activation_offloading"): (
        {}, {True: True, False: False, "legacy": True, "disk": True}),
    # torchao's 8-bit AdamW under axolotl's two names; transformers' adamw_bnb_8bit is its adamw_8bit
    # (training_args.py:129-130: "just an alias"; trainer_optimizer.py:257 optim_bits 8 for both)
    ("axolotl", "settings", "optimizer", "optimizer"): (
        {}, {"adamw_torch_8bit": "adamw_8bit", "ao_adamw_8bit": "adamw_8bit", "adamw_bnb_8bit": "adamw_8bit"}),
    ("axolotl", "settings", "attention", "attn_implementation"): ({}, ATTN),
    ("axolotl", "settings", "compile", "torch_compile"): ({}, {True: True, False: False, "auto": True}),
    ("bitsandbytes", "settings", "load_in_4bit", "load_in_4bit"): ({}, BOOL),
    ("bitsandbytes", "settings", "load_in_4bit", "_load_in_4bit"): ({}, BOOL),
    ("bitsandbytes", "settings", "load_in_4bit", "quantization_config.load_in_4bit"): ({}, BOOL),
    ("bitsandbytes", "settings", "load_in_4bit", "quantization_config._load_in_4bit"): ({}, BOOL),
    ("deepspeed", "settings", "strategy", "zero_optimization.stage"): ({}, ZERO),
    # torch_adam: torch.optim.AdamW; otherwise FusedAdam (deepspeed/runtime/engine.py:2377-2409)
    ("deepspeed", "settings", "optimizer", "optimizer.type"): (
        {"optimizer.params.torch_adam": True}, dict.fromkeys(DS_ADAM, "adamw_torch")),
    ("deepspeed", "settings", "optimizer", "optimizer.type", "fused"): ({}, dict.fromkeys(DS_ADAM, "adamw_torch_fused")),
    ("litgpt", "settings", "optimizer", "optimizer.class_path"): ({}, LITGPT_OPTIMIZERS),
    ("litgpt", "settings", "optimizer", "optimizer"): ({}, LITGPT_OPTIMIZERS),
    # the meta-llama/Meta-Llama-3.1-* repositories the hub renamed meta-llama/Llama-3.1-*
    ("litgpt", "model", "model", "checkpoint_dir"): ({}, {
        "meta-llama/Meta-Llama-3.1-8B": "meta-llama/Llama-3.1-8B",
        "meta-llama/Meta-Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-70B": "meta-llama/Llama-3.1-70B",
        "meta-llama/Meta-Llama-3.1-70B-Instruct": "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Meta-Llama-3.1-405B": "meta-llama/Llama-3.1-405B"}),
    # freeze trains some layers whole: charged as full fine-tuning
    ("llama_factory", "settings", "method", "finetuning_type"): ({}, {"lora": "lora", "full": "full", "freeze": "full"}),
    ("llama_factory", "settings", "target_modules", "lora_target"): ({}, {"all": ("all-linear",)}),  # a list of targets
    ("llama_factory", "settings", "attention", "flash_attn"): (
        {}, {"fa2": "flash_attention_2", "fa3": "flash_attention_3", "sdpa": "sdpa", "disabled": "eager"}),
    ("llama_factory", "settings", "compile", "torch_compile"): ({}, BOOL),
    ("llama_factory", "settings", "optimizer", "optim"): ({}, {"adamw_bnb_8bit": "adamw_8bit"}),
    ("transformers", "settings", "optimizer", "optim"): ({}, {"adamw_bnb_8bit": "adamw_8bit"}),
    ("torchtune", "settings", "gradient_checkpointing", "enable_activation_checkpointing"): ({}, CHECKPOINTING),
    ("torchtune", "settings", "activation_offloading", "enable_activation_offloading"): ({}, BOOL),
    # read by the full fine-tuning recipes only (full_finetune_single_device.py:143): a full builder
    ("torchtune", "settings", "optimizer_in_bwd", "optimizer_in_bwd"): (
        {"model._component_": "torchtune.models.llama3_1.llama3_1_8b"}, BOOL),
    ("torchtune", "settings", "compile", "compile"): ({}, BOOL),
    ("torchtune", "settings", "optimizer", "optimizer._component_"): ({}, {
        "torch.optim.AdamW": "adamw_torch", "torch.optim.Adam": "adam", "torch.optim.SGD": "sgd",
        "bitsandbytes.optim.PagedAdamW8bit": "paged_adamw_8bit", "bitsandbytes.optim.PagedAdamW": "paged_adamw_32bit",
        "bitsandbytes.optim.PagedAdamW32bit": "paged_adamw_32bit", "bitsandbytes.optim.AdamW8bit": "adamw_bnb_8bit",
        "torchao.optim.AdamW8bit": "adamw_8bit", "torchao.prototype.low_bit_optim.AdamW8bit": "adamw_8bit",
        "torchao.optim.AdamW4bit": "adamw_torch_4bit", "torchao.prototype.low_bit_optim.AdamW4bit": "adamw_torch_4bit"}),
    ("torchtune", "settings", "loss", "loss._component_"): ({}, {
        "torchtune.modules.loss.CEWithChunkedOutputLoss": "chunked", "torch.nn.CrossEntropyLoss": "standard"}),
    ("torchtune", "settings", "strategy", "fsdp_reshard_after_forward"): ({}, {True: "fsdp", False: "fsdp_shard_grad_op"}),
    ("torchtune", "settings", "offload", "fsdp_cpu_offload"): ({}, {True: "parameters", False: "none"}),
    # torchtune's builders (torchtune/models/<family>/_model_builders.py) and the hub model of the same size
    ("torchtune", "model", "model", "model._component_"): ({}, {
        "llama3_1_8b": "meta-llama/Llama-3.1-8B-Instruct", "llama3_1_70b": "meta-llama/Llama-3.1-70B-Instruct",
        "llama3_1_405b": "meta-llama/Llama-3.1-405B", "llama3_3_70b": "meta-llama/Llama-3.1-70B-Instruct",
        "llama3_2_1b": "meta-llama/Llama-3.2-1B-Instruct", "llama3_2_3b": "meta-llama/Llama-3.2-3B-Instruct",
        "llama2_7b": "meta-llama/Llama-2-7b-hf", "llama2_13b": "meta-llama/Llama-2-13b-hf",
        "llama2_70b": "meta-llama/Llama-2-70b-hf", "mistral_7b": "mistralai/Mistral-7B-v0.1",
        "qwen2_0_5b": "Qwen/Qwen2-0.5B-Instruct", "qwen2_1_5b": "Qwen/Qwen2-1.5B-Instruct",
        "qwen2_7b": "Qwen/Qwen2-7B-Instruct", "qwen2_5_3b": "Qwen/Qwen2.5-3B-Instruct",
        "qwen2_5_7b_instruct": "Qwen/Qwen2.5-7B-Instruct", "qwen2_5_7b_base": "Qwen/Qwen2.5-7B",
        "qwen2_5_14b_base": "Qwen/Qwen2.5-14B", "qwen2_5_32b_base": "Qwen/Qwen2.5-32B",
        "qwen2_5_72b_base": "Qwen/Qwen2.5-72B", "qwen2_5_14b_instruct": "Qwen/Qwen2.5-14B-Instruct",
        "qwen2_5_32b_instruct": "Qwen/Qwen2.5-32B-Instruct", "qwen2_5_72b_instruct": "Qwen/Qwen2.5-72B-Instruct",
        "phi3_mini": "microsoft/Phi-3-mini-4k-instruct", "phi4_14b": "microsoft/phi-4",
        "gemma_2b": "google/gemma-2b", "gemma_7b": "google/gemma-7b", "gemma2_2b": "google/gemma-2-2b-it",
        "gemma2_9b": "google/gemma-2-9b-it"}),
    ("transformers", "settings", "load_in_4bit", "load_in_4bit"): ({}, BOOL),
    ("transformers", "settings", "load_in_4bit", "model_init_kwargs.quantization_config.load_in_4bit"): ({}, BOOL),
    ("transformers", "settings", "gradient_checkpointing", "activation_checkpointing"): ({}, CHECKPOINTING),
    ("transformers", "settings", "gradient_checkpointing", "gradient_checkpointing"): ({}, CHECKPOINTING),
    ("transformers", "settings", "attention", "attn_implementation"): (
        {}, {**ATTN, "kernels-community/flash-attn": "flash_attention_2", "paged|eager": "eager"}),
    ("transformers", "settings", "attention", "model_init_kwargs.attn_implementation"): (
        {}, {**ATTN, "kernels-community/flash-attn": "flash_attention_2", "paged|eager": "eager"}),
    # TRL's accelerate presets (trl/accelerate_configs/*.yaml): DeepSpeed stages, FSDP 1 and 2 full shard,
    # multi-GPU DDP, one GPU
    ("transformers", "settings", "strategy", "accelerate_config"): ({}, {
        "zero1": "zero1", "zero2": "zero2", "zero3": "zero3", "fsdp1": "fsdp", "fsdp2": "fsdp", "multi_gpu": "ddp",
        "single_gpu": "none"}),
}

#: how a builder name or a hub id is written in the recipe key the rule matches
WRITTEN = {("torchtune", "model._component_"): "torchtune.models.some_family.{}",
           ("litgpt", "checkpoint_dir"): "checkpoints/{}"}


def _nested(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def _read(fmt: str, flat: dict, overrides: dict | None = None):
    return vramwise.read_recipe(_nested(flat), framework=fmt, overrides=overrides)


def _pairs(table) -> list:
    return list(table.items()) if isinstance(table, dict) else list(table)


def _got(r, group: str, name: str):
    return r.model if group == "model" else (r.settings if group == "settings" else r.extras)[name]


MAP_CASES = [pytest.param(spec[0], spec[1], spec[2], spec[3], ctx, raw, expected, id=f"{spec[0]}-{spec[3]}-{raw}")
             for spec, (ctx, table) in MAPS.items() for raw, expected in _pairs(table)]


@pytest.mark.parametrize("fmt, group, name, key, context, raw, expected", MAP_CASES)
def test_each_mapped_value_reads_as_the_framework_means_it(fmt, group, name, key, context, raw, expected):
    written = WRITTEN.get((fmt, key), "{}").format(raw) if isinstance(raw, str) else raw
    r = _read(fmt, {**context, key: written})
    assert _got(r, group, name) == expected
    assert r.origins[name].key == key  # from this rule, not a default that happens to agree
    # where the recipe's word is not vramwise's, the origin keeps the recipe's (the settings table shows both)
    assert r.origins[name].written == (None if canon(expected) == canon(raw) else canon(raw))


def _rules(group: str, fmt) -> dict:
    return {"model": fmt.model} if group == "model" else dict(getattr(fmt, group))


def test_the_cases_cover_every_map_rule_and_value():
    in_files = {}
    for fmt in bundled_formats():
        for group in ("settings", "extras", "model"):
            for name, rules in _rules(group, fmt).items():
                for rule in rules:
                    if rule.mapping is not None:
                        spec = (fmt.name, group, name, rule.key)
                        # a second map rule of the same key is told apart by its condition (DeepSpeed's FusedAdam)
                        spec += ("fused",) if spec in in_files else ()
                        in_files[spec] = set(rule.mapping)
    assert {spec: {canon(raw) for raw, _ in _pairs(table)} for spec, (_, table) in MAPS.items()} == in_files


#: (format, group, name, recipe keys and values, expected): each rule that divides or multiplies, by hand
ARITHMETIC = [
    # accelerate: num_processes counts every machine's processes (commands/config/config_args.py:180-182):
    # per node 16 / 2 machines = 8
    ("accelerate", "settings", "gpus_per_node",
     {"distributed_type": "MULTI_GPU", "num_processes": 16, "num_machines": 2}, 8),
    # litgpt: world size = devices x num_nodes (finetune/lora.py:111): 4 x 2 = 8
    ("litgpt", "settings", "world_size", {"devices": 4, "num_nodes": 2}, 8),
    # litgpt: accumulation = global batch // (devices x num_nodes) // micro batch (args.py:55-65), an absent
    # devices or num_nodes being 1: 64 // (2 x 2) // 4 = 4; 60 // 4 // 4 = 3 (3.75 rounded down)
    ("litgpt", "extras", "gradient_accumulation_steps",
     {"devices": 2, "num_nodes": 2, "train.global_batch_size": 64, "train.micro_batch_size": 4}, 4),
    ("litgpt", "extras", "gradient_accumulation_steps",
     {"devices": 2, "num_nodes": 2, "train.global_batch_size": 60, "train.micro_batch_size": 4}, 3),
    # no num_nodes: 64 // 2 // 4 = 8; 30 // 2 // 4 = 3 (3.75)
    ("litgpt", "extras", "gradient_accumulation_steps",
     {"devices": 2, "train.global_batch_size": 64, "train.micro_batch_size": 4}, 8),
    ("litgpt", "extras", "gradient_accumulation_steps",
     {"devices": 2, "train.global_batch_size": 30, "train.micro_batch_size": 4}, 3),
    # no devices: 64 // 4 nodes // 2 = 8; 63 // 4 // 2 = 7 (7.875)
    ("litgpt", "extras", "gradient_accumulation_steps",
     {"num_nodes": 4, "train.global_batch_size": 64, "train.micro_batch_size": 2}, 8),
    ("litgpt", "extras", "gradient_accumulation_steps",
     {"num_nodes": 4, "train.global_batch_size": 63, "train.micro_batch_size": 2}, 7),
    # neither: 64 // 4 = 16; 66 // 4 = 16 (16.5)
    ("litgpt", "extras", "gradient_accumulation_steps", {"train.global_batch_size": 64, "train.micro_batch_size": 4}, 16),
    ("litgpt", "extras", "gradient_accumulation_steps", {"train.global_batch_size": 66, "train.micro_batch_size": 4}, 16),
]


@pytest.mark.parametrize("fmt, group, name, flat, expected", ARITHMETIC,
                         ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(ARITHMETIC)])
def test_each_divided_or_multiplied_value(fmt, group, name, flat, expected):
    r = _read(fmt, flat)
    assert _got(r, group, name) == expected
    assert r.origins[name].kind == "recipe"


def test_the_arithmetic_cases_cover_every_rule_that_divides_or_multiplies():
    in_files = set()
    for fmt in bundled_formats():
        for group in ("settings", "extras"):
            for name, rules in _rules(group, fmt).items():
                if any(rule.divide_by or rule.multiply_by for rule in rules):
                    in_files.add((fmt.name, group, name))
                    # each such rule is reached by one case at least: the keys a case holds select the rule
                    for rule in rules:
                        if rule.divide_by or rule.multiply_by:
                            needed = {rule.key, *rule.divide_by, *rule.multiply_by}
                            assert any(c[:3] == (fmt.name, group, name) and needed <= set(c[3]) and
                                       all(k in needed or k in {c2.key for c2 in rule.when} for k in c[3])
                                       for c in ARITHMETIC), (fmt.name, name, rule.where)
    assert {c[:3] for c in ARITHMETIC} == in_files


# -- DeepSpeed's optimizer section wins over the Trainer's optim (real parts) -------------------------

@pytest.mark.parametrize("ds_file, expected", [
    # zero_stage1_config.json: "optimizer": {"type": "AdamW", "params": {"torch_adam": true, ...}}:
    # torch.optim.AdamW (deepspeed/runtime/engine.py:2377-2382)
    ("zero_stage1_config.json", "adamw_torch"),
    # zero_stage3_config.json: AdamW without torch_adam: FusedAdam (engine.py:2402-2409)
    ("zero_stage3_config.json", "adamw_torch_fused"),
])
def test_deepspeed_optimizer_wins_over_the_recipes_optim(tmp_path, ds_file, expected):
    shutil.copy(FIXTURES / "deepspeed" / ds_file, tmp_path / ds_file)
    ds = json.loads((tmp_path / ds_file).read_text())
    assert ds["optimizer"]["type"] == "AdamW"
    recipe = tmp_path / "sft.yaml"
    recipe.write_text(f"model_name_or_path: meta-llama/Llama-3.1-8B\nper_device_train_batch_size: 2\n"
                      f"optim: adamw_bnb_8bit\ndeepspeed: {ds_file}\n")
    r = vramwise.read_recipe(recipe)
    assert r.format == "transformers"
    assert r.settings["optimizer"] == expected
    assert r.origins["optimizer"].key == "optimizer.type"
    # without the DeepSpeed part the recipe's own optim stands
    recipe.write_text("model_name_or_path: meta-llama/Llama-3.1-8B\nper_device_train_batch_size: 2\n"
                      "optim: adamw_bnb_8bit\n")
    # transformers' adamw_bnb_8bit is its adamw_8bit (training_args.py:129-130), vramwise's name for it
    assert vramwise.read_recipe(recipe).settings["optimizer"] == "adamw_8bit"
