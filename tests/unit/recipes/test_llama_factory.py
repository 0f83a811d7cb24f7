"""LLaMA-Factory recipes (frameworks/llama_factory.yaml) read into settings, with the origin of each.

The fixtures are LLaMA-Factory's own example recipes (v0.9.5, commit 7af90952), copied with a first line
naming their source, so every line number below is the line in LLaMA-Factory's file plus one. Expected
values are read off the recipe text by hand; defaults are LLaMA-Factory 0.9.5's (and transformers'
TrainingArguments' for the trainer fields), each with its source in a comment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import vramwise
from vramwise import RecipeError
from vramwise.recipes.reader import bundled_formats
from helpers import where

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "llama_factory"
HAS_DEEPSPEED = "deepspeed" in bundled_formats().names()
#: The examples train Qwen/Qwen3-4B-Instruct-2507, the Qwen3-4B architecture the catalog holds.
QWEN3_4B = "Qwen/Qwen3-4B"


def read(name: str, **kw):
    return vramwise.read_recipe(FIXTURES / name, **kw)



def default_source(recipe, name):
    o = recipe.origins[name]
    assert o.kind == "framework default" and o.framework == "LLaMA-Factory" and o.version == "0.9.5", name
    return o.source


def write_recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return path


# -- train_lora/qwen3_lora_sft.yaml -------------------------------------------------------------

def test_lora_sft_settings_and_origins():
    r = read("qwen3_lora_sft.yaml")
    assert r.format == "llama_factory" and r.framework == "LLaMA-Factory" and r.framework_version == "0.9.5"
    assert r.model == "Qwen/Qwen3-4B-Instruct-2507"  # model_name_or_path (line 3)
    assert r.profile == "hf"  # no use_unsloth
    s = r.settings
    assert s["method"] == "lora"  # finetuning_type: lora (line 9)
    assert s["lora_rank"] == 8  # lora_rank: 8 (line 10)
    assert s["target_modules"] == ("all-linear",)  # lora_target: all (line 11)
    assert s["seq_len"] == 2048  # cutoff_len: 2048 (line 16)
    assert s["batch_size"] == 1  # per_device_train_batch_size: 1 (line 31)
    assert r.extras["gradient_accumulation_steps"] == 8  # line 32
    assert r.extras["num_train_epochs"] == 3.0  # line 34
    assert where(r, "method") == ("recipe", "finetuning_type", 9)
    assert where(r, "lora_rank") == ("recipe", "lora_rank", 10)
    assert where(r, "target_modules") == ("recipe", "lora_target", 11)
    assert where(r, "seq_len") == ("recipe", "cutoff_len", 16)
    assert where(r, "batch_size") == ("recipe", "per_device_train_batch_size", 31)
    # not in the recipe: LLaMA-Factory's (and transformers') defaults
    assert s["gradient_checkpointing"] == "true"  # model_args.py:145 disable_gradient_checkpointing False
    assert "model_args.py:145" in default_source(r, "gradient_checkpointing")
    assert s["optimizer"] == "adamw_torch_fused"  # transformers training_args.py:806-815 (torch >= 2.8)
    assert "training_args.py:806" in default_source(r, "optimizer")
    assert s["attention"] == "sdpa"  # flash_attn auto (model_args.py:117): transformers' sdpa
    assert "model_args.py:117" in default_source(r, "attention")
    assert s["load_in_4bit"] is False and s["loss"] == "standard" and s["lora_dropout"] == 0.0
    assert s["strategy"] == "none"
    # every key of the recipe is a LLaMA-Factory or TrainingArguments field; nothing here is unmodelled
    assert r.warnings == ()


def test_lora_sft_estimate_matches_the_settings_read_by_hand():
    r = read("qwen3_lora_sft.yaml", overrides={"model": QWEN3_4B})
    by_hand = dict(method="lora", lora_rank=8, target_modules="all-linear", seq_len=2048, batch_size=1,
                   gradient_checkpointing="true", optimizer="adamw_torch_fused", attention="sdpa",
                   load_in_4bit=False, loss="standard", lora_dropout=0.0, compile=False)
    assert vramwise.estimate(r).total == vramwise.estimate(QWEN3_4B, profile="hf", **by_hand).total


# -- train_qlora/qwen3_lora_sft_otfq.yaml and extras/fsdp_qlora/llama3_lora_sft.yaml --------------

def test_qlora_on_the_fly_quantization():
    r = read("qwen3_lora_sft_otfq.yaml")
    # quantization_bit: 4 (line 4) with quantization_method: bnb (line 5) and finetuning_type: lora (line 11)
    assert r.settings["method"] == "qlora" and r.settings["load_in_4bit"] is True
    assert where(r, "method") == ("recipe", "quantization_bit", 4)
    assert where(r, "load_in_4bit") == ("recipe", "quantization_bit", 4)
    assert r.warnings == ()  # bnb 4-bit is what vramwise models
    r = read("qwen3_lora_sft_otfq.yaml", overrides={"model": QWEN3_4B})
    by_hand = dict(method="qlora", load_in_4bit=True, lora_rank=8, target_modules="all-linear", seq_len=2048,
                   batch_size=1, gradient_checkpointing="true", optimizer="adamw_torch_fused", attention="sdpa")
    assert vramwise.estimate(r).total == vramwise.estimate(QWEN3_4B, profile="hf", **by_hand).total


def test_fsdp_qlora_without_a_method_key():
    r = read("fsdp_qlora_llama3_lora_sft.yaml")
    # quantization_bit: 4 (line 4); quantization_method unset: bnb (model_args.py:279)
    assert r.settings["method"] == "qlora" and r.settings["load_in_4bit"] is True
    assert r.settings["batch_size"] == 1 and r.extras["gradient_accumulation_steps"] == 8  # lines 33, 34
    assert r.warnings == ()


# -- train_full/qwen3_full_sft.yaml and train_lora/qwen3_lora_sft_ds3.yaml (ds_z3_config.json) ---

def test_full_sft():
    r = read("qwen3_full_sft.yaml")
    assert r.settings["method"] == "full"  # finetuning_type: full (line 9)
    assert where(r, "method") == ("recipe", "finetuning_type", 9)
    assert r.extras["gradient_accumulation_steps"] == 2  # line 31


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="the deepspeed format (frameworks/deepspeed.yaml) is not bundled yet")
@pytest.mark.parametrize("name", ["qwen3_full_sft.yaml", "qwen3_lora_sft_ds3.yaml"])
def test_deepspeed_zero3_file_is_read(name):
    r = read(name)
    # deepspeed: examples/deepspeed/ds_z3_config.json, read from the recipe's folder: stage 3, no offload
    assert [Path(f).name for fmt, f in r.parts if fmt == "deepspeed"] == ["ds_z3_config.json"]
    assert r.settings["strategy"] == "zero3" and r.settings["offload"] == "none"
    assert not any("unknown" in w for w in r.warnings)


# -- extras: GaLore, mixture of depths, LLaMA Pro (freeze) --------------------------------------

def test_galore_is_named_not_modelled():
    r = read("galore_llama3_full_sft.yaml")
    assert r.settings["method"] == "full"  # line 9
    assert r.settings["batch_size"] == 1  # line 35
    assert any("galore_llama3_full_sft.yaml:10: use_galore" in w and "not modelled" in w for w in r.warnings)
    assert not any("unknown" in w for w in r.warnings)  # galore_target, galore_rank...: known keys


def test_mixture_of_depths_with_paged_optimizer():
    r = read("mod_llama3_full_sft.yaml")
    assert r.settings["optimizer"] == "paged_adamw_8bit"  # optim: paged_adamw_8bit (line 33)
    assert where(r, "optimizer") == ("recipe", "optim", 33)
    assert any("mod_llama3_full_sft.yaml:10: mixture_of_depths" in w for w in r.warnings)


def test_freeze_is_estimated_as_full_with_a_warning():
    r = read("llama_pro_llama3_freeze_sft.yaml")
    # finetuning_type: freeze (line 9): only freeze_trainable_layers train; full fine-tuning is the upper bound
    assert r.settings["method"] == "full"
    assert where(r, "method") == ("recipe", "finetuning_type", 9)
    text = "\n".join(r.warnings)
    assert "freeze_sft.yaml:9: finetuning_type = freeze" in text
    assert "freeze_sft.yaml:12: use_llama_pro" in text
    assert r.model == "models/llama3-8b-pro"  # a local path that is not there: kept as written


# -- defaults (a recipe that sets none of them) -------------------------------------------------

def test_defaults_and_their_sources(tmp_path):
    r = vramwise.read_recipe(write_recipe(tmp_path, f"model_name_or_path: {QWEN3_4B}\nstage: sft\n"))
    s = r.settings
    expected = {
        # name: (value, a piece of the source)
        "method": ("lora", "finetuning_args.py:464"),  # finetuning_type default lora
        "batch_size": (8, "training_args.py:777"),  # transformers' per_device_train_batch_size default 8
        "seq_len": (2048, "data_args.py:46"),  # cutoff_len default 2048
        "lora_rank": (8, "finetuning_args.py:77"),  # lora_rank default 8
        "target_modules": (("all-linear",), "finetuning_args.py:81"),  # lora_target default all
        "lora_dropout": (0.0, "finetuning_args.py:73"),
        "gradient_checkpointing": ("true", "model_args.py:145"),
        "optimizer": ("adamw_torch_fused", "training_args.py:806"),
        "attention": ("sdpa", "model_args.py:117"),
        "load_in_4bit": (False, "model_args.py:283"),
        "loss": ("standard", "model_args.py:137"),
        "compile": (False, "training_args.py:940"),
    }
    for name, (value, source) in expected.items():
        assert s[name] == value, name
        assert source in default_source(r, name), name
    assert r.extras["gradient_accumulation_steps"] == 1  # transformers training_args.py:849-850
    assert r.extras["num_train_epochs"] == 3.0  # transformers training_args.py:778
    assert r.profile == "hf"
    assert r.warnings == ()


# -- rules beyond the fixtures ------------------------------------------------------------------

BASE = {"model_name_or_path": QWEN3_4B, "stage": "sft", "finetuning_type": "lora"}


def test_unsloth_profile_and_checkpointing():
    r = vramwise.read_recipe({**BASE, "use_unsloth": True})
    # use_unsloth loads through FastLanguageModel (model/loader.py:146) with use_gradient_checkpointing
    # "unsloth" (model/model_utils/unsloth.py:47)
    assert r.profile == "unsloth" and r.settings["gradient_checkpointing"] == "unsloth"
    r = vramwise.read_recipe({**BASE, "use_unsloth_gc": True})
    assert r.profile == "hf" and r.settings["gradient_checkpointing"] == "unsloth"
    r = vramwise.read_recipe({**BASE, "disable_gradient_checkpointing": True})
    assert r.settings["gradient_checkpointing"] == "none"


@pytest.mark.parametrize("flash_attn, expected", [
    ("fa2", "flash_attention_2"), ("fa3", "flash_attention_3"), ("sdpa", "sdpa"), ("disabled", "eager"),
    ("auto", "sdpa"),  # attention.py:65: auto leaves transformers' choice
])
def test_flash_attn(flash_attn, expected):
    assert vramwise.read_recipe({**BASE, "flash_attn": flash_attn}).settings["attention"] == expected


def test_liger_kernel_fuses_the_loss_for_sft_only():
    # liger_kernel.py:93-100: the fused linear cross-entropy for pt and sft; other stages need the logits
    r = vramwise.read_recipe({**BASE, "enable_liger_kernel": True})
    assert r.settings["loss"] == "fused"
    assert any("enable_liger_kernel" in w and "not modelled" in w for w in r.warnings)  # RoPE, RMSNorm, SwiGLU
    r = vramwise.read_recipe({**BASE, "stage": "dpo", "enable_liger_kernel": True})
    assert r.settings["loss"] == "standard"
    assert any("stage = dpo" in w for w in r.warnings)


def test_lora_target_list_and_packing():
    r = vramwise.read_recipe({**BASE, "lora_target": "q_proj,v_proj", "packing": True})
    # lora_target is comma-separated (finetuning_args.py:561-564); the setting splits it the same way
    assert r.settings["target_modules"] == ("q_proj", "v_proj")
    assert any("packing = true" in w for w in r.warnings)
    # stage pt packs unless packing says otherwise (hparams/parser.py:520)
    r = vramwise.read_recipe({**BASE, "stage": "pt"})
    assert any("packing" in w and "parser.py:520" in w for w in r.warnings)
    assert not any("packing" in w for w in vramwise.read_recipe({**BASE, "stage": "pt", "packing": False}).warnings)


def test_8_bit_quantization_is_named():
    r = vramwise.read_recipe({**BASE, "quantization_bit": 8})
    assert r.settings["method"] == "lora" and r.settings["load_in_4bit"] is False
    assert any("quantization_bit = 8" in w and "not modelled" in w for w in r.warnings)


# -- bad recipes --------------------------------------------------------------------------------

def test_unknown_key_warns(tmp_path):
    path = write_recipe(tmp_path, f"model_name_or_path: {QWEN3_4B}\nstage: sft\ncutoff_len: 1024\nlora_rnak: 16\n")
    r = vramwise.read_recipe(path)
    assert any(f"{path}:4" in w and "lora_rnak" in w and "unknown llama_factory key" in w for w in r.warnings)


def test_wrong_type_fails_with_file_line_and_key(tmp_path):
    path = write_recipe(tmp_path, f"model_name_or_path: {QWEN3_4B}\nstage: sft\ncutoff_len: long\n")
    with pytest.raises(RecipeError) as e:
        vramwise.read_recipe(path)
    assert f"{path}:3" in str(e.value) and "cutoff_len" in str(e.value)


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="the deepspeed format (frameworks/deepspeed.yaml) is not bundled yet")
def test_missing_deepspeed_file_fails_naming_it(tmp_path):
    path = write_recipe(tmp_path, f"model_name_or_path: {QWEN3_4B}\nstage: sft\n"
                                  "deepspeed: examples/deepspeed/ds_z9_config.json\n")
    with pytest.raises(RecipeError) as e:
        vramwise.read_recipe(path)
    assert f"{path}:3" in str(e.value) and "ds_z9_config.json" in str(e.value)


# -- writing advice back ------------------------------------------------------------------------

def test_changes_are_written_in_llama_factory_keys():
    r = read("qwen3_lora_sft.yaml")
    assert r.write({"batch_size": 1, "gradient_accumulation_steps": 16}) == {
        "per_device_train_batch_size": 1, "gradient_accumulation_steps": 16}
    assert r.write({"method": "qlora"}) == {"finetuning_type": "lora", "quantization_bit": 4}
    assert r.write({"seq_len": 1024, "lora_rank": 4}) == {"cutoff_len": 1024, "lora_rank": 4}
    assert r.write({"gradient_checkpointing": "unsloth"}) == {"disable_gradient_checkpointing": False,
                                                              "use_unsloth_gc": True}
    assert r.write({"optimizer": "adamw_8bit", "attention": "flash_attention_2"}) == {
        "optim": "adamw_8bit", "flash_attn": "fa2"}
    assert r.write({"loss": "fused"}) == {"enable_liger_kernel": True}


def test_lora_target_all_is_shown_with_its_keyword_and_the_modules_it_adapts():
    # lora_target: all is LLaMA-Factory's word for every linear layer but the output head
    # (model/model_utils/misc.py find_all_linear_modules), PEFT's all-linear. On LlamaForCausalLM the nn.Linear
    # modules are q_proj, k_proj, v_proj, o_proj (LlamaAttention), gate_proj, up_proj, down_proj (LlamaMLP) and
    # lm_head, the output layer left out; sorted, as the estimate lists them:
    adapted = ("down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj")
    r = vramwise.read_recipe({"model_name_or_path": "meta-llama/Llama-3.2-1B-Instruct", "stage": "sft",
                              "finetuning_type": "lora", "lora_target": "all", "per_device_train_batch_size": 1,
                              "cutoff_len": 512})
    e = vramwise.estimate(r)
    assert e.lora_targets == adapted
    # the recipe's word, vramwise's keyword and the modules, and where it came from
    assert r.shown("target_modules", e.lora_targets) == f"all-linear (recipe: all) (adapts: {','.join(adapted)})"
    assert r.origins["target_modules"].key == "lora_target"
