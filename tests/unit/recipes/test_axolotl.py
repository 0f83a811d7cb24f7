"""axolotl recipes (frameworks/axolotl.yaml) read into settings, with the origin of each.

The fixtures are axolotl's own example recipes (v0.18.0, commit 2f5cb9da), copied with a first line naming
their source, so every line number below is the line in axolotl's file plus one. Expected values are read
off the recipe text by hand; defaults are axolotl 0.18.0's, each with its source in a comment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import vramwise
from vramwise import RecipeError
from vramwise.recipes.reader import bundled_formats
from helpers import where

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "axolotl"
HAS_DEEPSPEED = "deepspeed" in bundled_formats().names()


def read(name: str, **kw):
    return vramwise.read_recipe(FIXTURES / name, **kw)



def write_recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.yml"
    path.write_text(text)
    return path


# -- llama-3/lora-1b.yml ------------------------------------------------------------------------

def test_lora_1b_settings_and_origins():
    r = read("llama-3-lora-1b.yml")
    assert r.format == "axolotl" and r.framework == "axolotl" and r.framework_version == "0.18.0"
    assert r.model == "NousResearch/Llama-3.2-1B"  # base_model (line 2)
    assert r.profile == "hf"  # axolotl trains with transformers' Trainer + PEFT
    s = r.settings
    assert s["method"] == "lora"  # adapter: lora (line 13)
    assert s["batch_size"] == 2  # micro_batch_size: 2 (line 40)
    assert s["seq_len"] == 2048  # sequence_len: 2048 (line 16)
    assert s["lora_rank"] == 16  # lora_r: 16 (line 21)
    assert s["lora_dropout"] == 0.05  # lora_dropout: 0.05 (line 23)
    # lora_target_modules (lines 24-31), in the recipe's order
    assert tuple(s["target_modules"]) == ("gate_proj", "down_proj", "up_proj", "q_proj", "v_proj", "k_proj", "o_proj")
    assert s["gradient_checkpointing"] == "true"  # gradient_checkpointing: true (line 50)
    assert s["optimizer"] == "adamw_8bit"  # optimizer: adamw_8bit (line 43)
    assert s["attention"] == "flash_attention_2"  # attn_implementation: flash_attention_2 (line 53)
    assert s["load_in_4bit"] is False  # not set: peft.py:37-38 default False
    assert s["loss"] == "standard"  # no loss plugin, no chunked_cross_entropy
    assert s["strategy"] == "none" and s["offload"] == "none"  # no deepspeed, no fsdp
    assert r.extras["gradient_accumulation_steps"] == 2  # line 39
    assert r.extras["num_epochs"] == 1  # line 41
    assert where(r, "method") == ("recipe", "adapter", 13)
    assert where(r, "batch_size") == ("recipe", "micro_batch_size", 40)
    assert where(r, "seq_len") == ("recipe", "sequence_len", 16)
    assert where(r, "lora_rank") == ("recipe", "lora_r", 21)
    assert where(r, "target_modules") == ("recipe", "lora_target_modules", 24)
    assert where(r, "gradient_checkpointing") == ("recipe", "gradient_checkpointing", 50)
    assert where(r, "optimizer") == ("recipe", "optimizer", 43)
    assert where(r, "attention") == ("recipe", "attn_implementation", 53)
    assert r.origins["batch_size"].file.endswith("llama-3-lora-1b.yml")
    # load_in_4bit: axolotl's default, with its source
    o = r.origins["load_in_4bit"]
    assert o.kind == "framework default" and o.framework == "axolotl" and o.version == "0.18.0"
    assert "peft.py:37" in o.source
    # sample_packing: true (line 17) changes memory but is not modelled
    assert any("lora-1b.yml:17" in w and "sample_packing" in w for w in r.warnings)
    assert not any("unknown axolotl key" in w for w in r.warnings)


def test_lora_1b_estimate_matches_the_settings_read_by_hand():
    # the recipe's base (NousResearch/Llama-3.2-1B) is the Llama 3.2 1B architecture; the catalog has it as
    # meta-llama/Llama-3.2-1B-Instruct, so the model is overridden (no download).
    model = "meta-llama/Llama-3.2-1B-Instruct"
    r = read("llama-3-lora-1b.yml", overrides={"model": model})
    by_hand = dict(
        method="lora", batch_size=2, seq_len=2048, lora_rank=16, lora_dropout=0.05,
        target_modules=["gate_proj", "down_proj", "up_proj", "q_proj", "v_proj", "k_proj", "o_proj"],
        gradient_checkpointing="true", optimizer="adamw_8bit", attention="flash_attention_2",
        load_in_4bit=False, loss="standard", loss_chunks=8, compile=False, activation_offloading=False,
    )
    assert vramwise.estimate(r).total == vramwise.estimate(model, profile="hf", **by_hand).total


# -- llama-3/qlora-1b.yml -----------------------------------------------------------------------

def test_qlora_1b():
    r = read("llama-3-qlora-1b.yml")
    s = r.settings
    assert s["method"] == "qlora"  # adapter: qlora (line 16)
    assert s["load_in_4bit"] is True  # load_in_4bit: true (line 7)
    assert s["lora_rank"] == 32  # lora_r: 32 (line 24)
    assert s["batch_size"] == 2  # micro_batch_size: 2 (line 43)
    # optimizer: adamw_bnb_8bit (line 45), transformers' other name of adamw_8bit (training_args.py:129-130)
    assert s["optimizer"] == "adamw_8bit"
    assert (r.origins["optimizer"].written, r.origins["optimizer"].line) == ("adamw_bnb_8bit", 45)
    assert r.extras["gradient_accumulation_steps"] == 4  # line 42
    assert where(r, "load_in_4bit") == ("recipe", "load_in_4bit", 7)
    model = "meta-llama/Llama-3.2-1B-Instruct"
    by_hand = dict(method="qlora", load_in_4bit=True, batch_size=2, seq_len=2048, lora_rank=32, lora_dropout=0.05,
                   target_modules=["gate_proj", "down_proj", "up_proj", "q_proj", "v_proj", "k_proj", "o_proj"],
                   gradient_checkpointing="true", optimizer="adamw_8bit", attention="flash_attention_2")
    got = vramwise.estimate(read("llama-3-qlora-1b.yml", overrides={"model": model})).total
    assert got == vramwise.estimate(model, profile="hf", **by_hand).total


# -- llama-3/fft-8b-liger-fsdp.yaml -------------------------------------------------------------

def test_fft_liger_fsdp():
    r = read("llama-3-fft-8b-liger-fsdp.yaml")
    s = r.settings
    assert s["method"] == "full"  # no adapter: peft.py:41-46 (None = all parameters)
    assert r.origins["method"].kind == "framework default"
    assert s["batch_size"] == 2 and s["seq_len"] == 4096  # lines 39, 28
    assert s["optimizer"] == "adamw_torch_fused"  # line 41
    # liger_fused_linear_cross_entropy: true (line 11): the logits never exist whole
    assert s["loss"] == "fused" and where(r, "loss") == ("recipe", "liger_fused_linear_cross_entropy", 11)
    # fsdp_config (line 62) -> FSDP full shard; fsdp_offload_params: true (line 65) -> parameters offloaded
    assert s["strategy"] == "fsdp" and where(r, "strategy") == ("recipe", "fsdp_config", 62)
    assert s["offload"] == "parameters" and where(r, "offload") == ("recipe", "fsdp_config.fsdp_offload_params", 65)
    text = "\n".join(r.warnings)
    # the other Liger kernels (lines 8-10) are named, not modelled
    for key, line in (("liger_rope", 8), ("liger_rms_norm", 9), ("liger_glu_activation", 10)):
        assert f"fsdp.yaml:{line}: {key}" in text
    assert "sample_packing" in text
    assert "world_size" in text  # the recipe does not say how many GPUs
    # fsdp_limit_all_gathers, fsdp_backward_prefetch...: known keys, no "unknown key" warning
    assert "unknown axolotl key" not in text


def test_fft_liger_fsdp_estimate_with_world_size():
    model = "meta-llama/Llama-3.1-8B"  # the recipe's NousResearch/Meta-Llama-3.1-8B, from the catalog
    r = read("llama-3-fft-8b-liger-fsdp.yaml", overrides={"model": model, "world_size": 8})
    assert r.origins["world_size"].kind == "override"
    by_hand = dict(method="full", batch_size=2, seq_len=4096, gradient_checkpointing="true",
                   optimizer="adamw_torch_fused", attention="flash_attention_2", loss="fused",
                   strategy="fsdp", offload="parameters", world_size=8)
    assert vramwise.estimate(r).total == vramwise.estimate(model, profile="hf", **by_hand).total


# -- mistral/mixtral/mixtral.yml (deepspeed_configs/zero2.json) ---------------------------------

def test_mixtral_qlora_all_linear():
    r = read("mistral-mixtral.yml")
    s = r.settings
    assert r.model == "mistralai/Mixtral-8x7B-v0.1"  # line 2
    assert s["method"] == "qlora" and s["load_in_4bit"] is True  # adapter: qlora (33), load_in_4bit: true (12)
    # lora_target_linear: true (line 43): every linear layer (loaders/adapter.py:174-182)
    assert s["target_modules"] == ("all-linear",)
    assert where(r, "target_modules") == ("recipe", "lora_target_linear", 43)
    assert s["lora_rank"] == 32 and s["batch_size"] == 1 and s["seq_len"] == 4096  # lines 40, 61, 36


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="the deepspeed format (frameworks/deepspeed.yaml) is not bundled yet")
def test_mixtral_reads_its_deepspeed_file():
    r = read("mistral-mixtral.yml")
    # deepspeed: deepspeed_configs/zero2.json (line 82), read from the recipe's folder:
    # zero_optimization.stage 2 with offload_optimizer.device cpu
    assert [Path(f).name for fmt, f in r.parts if fmt == "deepspeed"] == ["zero2.json"]
    assert r.settings["strategy"] == "zero2"
    assert r.settings["offload"] == "optimizer"


# -- gpt-oss/gpt-oss-20b-fft-deepspeed-zero3.yaml -----------------------------------------------

def test_gpt_oss_cut_cross_entropy_and_activation_offloading():
    r = read("gpt-oss-20b-fft-deepspeed-zero3.yaml")
    s = r.settings
    assert s["method"] == "full"
    # plugins: [axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin] (line 8-9): cut_cross_entropy
    # defaults to True once the plugin is listed (integrations/cut_cross_entropy/args.py:33)
    assert s["loss"] == "fused" and where(r, "loss") == ("recipe", "plugins", 8)
    # optimizer: adamw_torch_8bit (line 40): torchao's AdamW8bit, the bytes of an 8-bit AdamW
    assert s["optimizer"] == "adamw_8bit"
    # attn_implementation: kernels-community/vllm-flash-attn3 (line 47)
    assert s["attention"] == "flash_attention_3"
    assert s["activation_offloading"] is True  # line 50
    assert s["gradient_checkpointing"] == "true"  # line 49
    assert any("model_quantization_config" in w for w in r.warnings)  # Mxfp4Config (line 4)


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="the deepspeed format (frameworks/deepspeed.yaml) is not bundled yet")
def test_gpt_oss_zero3():
    r = read("gpt-oss-20b-fft-deepspeed-zero3.yaml")
    # deepspeed_configs/zero3_bf16.json: zero_optimization.stage 3, no offload
    assert r.settings["strategy"] == "zero3" and r.settings["offload"] == "none"


# -- defaults (a recipe that sets none of them) -------------------------------------------------

def test_defaults_and_their_sources(tmp_path):
    r = vramwise.read_recipe(write_recipe(tmp_path, "base_model: meta-llama/Llama-3.2-1B-Instruct\n"
                                                    "datasets:\n  - path: tatsu-lab/alpaca\n    type: alpaca\n"))
    s, o = r.settings, r.origins
    expected = {
        # name: (value, a piece of the source)
        "method": ("full", "peft.py:41"),  # adapter default None: all parameters
        "batch_size": (1, "training.py:77"),  # micro_batch_size default 1
        "seq_len": (512, "config.py:665"),  # sequence_len default 512
        "gradient_checkpointing": ("none", "config.py:600"),  # default False
        "optimizer": ("adamw_torch_fused", "training.py:122"),  # optimizer default adamw_torch_fused
        "attention": ("sdpa", "model.py:757"),  # attn_implementation unset: transformers' sdpa
        "load_in_4bit": (False, "peft.py:37"),
        "lora_dropout": (0.0, "peft.py:80"),
        "loss": ("standard", "config.py:978"),
        "loss_chunks": (8, "chunked.py:127"),
        "compile": (False, "config.py:1148"),
        "activation_offloading": (False, "config.py:623"),
    }
    for name, (value, source) in expected.items():
        assert s[name] == value, name
        assert o[name].kind == "framework default" and source in o[name].source, name
        assert o[name].framework == "axolotl" and o[name].version == "0.18.0"
    assert r.extras["gradient_accumulation_steps"] == 1  # training.py:71-72
    assert r.extras["num_epochs"] == 1.0  # training.py:267
    # lora_r has no default in axolotl (peft.py:53): vramwise's applies
    assert o["lora_rank"].kind == "vramwise default"
    assert r.warnings == ()


# -- rules beyond the fixtures ------------------------------------------------------------------

BASE = {"base_model": "meta-llama/Llama-3.2-1B-Instruct"}


@pytest.mark.parametrize("flags, expected", [
    ({"flash_attention": True}, "flash_attention_2"),
    ({"sdp_attention": True}, "sdpa"),
    ({"eager_attention": True}, "eager"),
    ({"flex_attention": True}, "flex_attention"),
    # enums.py:118-125: flex before flash before sdp
    ({"flex_attention": True, "flash_attention": True}, "flex_attention"),
    ({"flash_attention": True, "sdp_attention": True}, "flash_attention_2"),
    ({"flash_attention": False, "sdp_attention": True}, "sdpa"),
])
def test_legacy_attention_flags(flags, expected):
    assert vramwise.read_recipe({**BASE, **flags}).settings["attention"] == expected


def test_xformers_is_named_not_modelled():
    # xformers_attention wins over flash_attention in axolotl (enums.py:118); vramwise does not model it
    r = vramwise.read_recipe({**BASE, "xformers_attention": True, "flash_attention": True})
    assert r.settings["attention"] == "sdpa" and r.origins["attention"].kind == "framework default"
    assert any("xformers_attention" in w and "not modelled" in w for w in r.warnings)


def test_gradient_checkpointing_offload_means_activation_offloading():
    # validation.py:1427-1435: offload -> gradient_checkpointing true + activation_offloading true
    r = vramwise.read_recipe({**BASE, "gradient_checkpointing": "offload"})
    assert r.settings["gradient_checkpointing"] == "true" and r.settings["activation_offloading"] is True


def test_lora_with_load_in_4bit_stays_16_bit():
    # loaders/model.py:712: only adapter qlora builds the 4-bit BitsAndBytesConfig
    r = vramwise.read_recipe({**BASE, "adapter": "lora", "load_in_4bit": True})
    assert r.settings["method"] == "lora" and r.settings["load_in_4bit"] is False
    assert any("load_in_4bit" in w and "not modelled" in w for w in r.warnings)


def test_modules_to_save_are_named_not_modelled():
    # loaders/adapter.py:196 passes lora_modules_to_save to LoraConfig(modules_to_save=...): trained in full beside
    # the adapters (examples/llama-3/lora-8b.yml saves embed_tokens and lm_head); vramwise counts adapters only
    r = vramwise.read_recipe({**BASE, "adapter": "lora", "lora_modules_to_save": ["embed_tokens", "lm_head"]})
    assert any("lora_modules_to_save" in w and "not modelled" in w for w in r.warnings)
    assert not any("lora_modules_to_save" in w for w in vramwise.read_recipe({**BASE, "adapter": "lora"}).warnings)


@pytest.mark.parametrize("fsdp, expected", [
    ({"fsdp_config": {"fsdp_version": 2, "reshard_after_forward": False}}, ("fsdp_shard_grad_op", "none")),
    ({"fsdp_config": {"fsdp_version": 2, "offload_params": True}}, ("fsdp", "parameters")),
    ({"fsdp": ["shard_grad_op", "auto_wrap"]}, ("fsdp_shard_grad_op", "none")),
    ({"fsdp": ["hybrid_shard", "auto_wrap"]}, ("fsdp_hybrid", "none")),
    ({"fsdp": ["full_shard", "offload", "auto_wrap"]}, ("fsdp", "parameters")),
])
def test_fsdp_keys(fsdp, expected):
    r = vramwise.read_recipe({**BASE, **fsdp})
    assert (r.settings["strategy"], r.settings["offload"]) == expected


def test_losses_and_compile():
    # chunked_cross_entropy with its chunk count (patch_manager.py:304-311)
    r = vramwise.read_recipe({**BASE, "chunked_cross_entropy": True, "chunked_cross_entropy_num_chunks": 16})
    assert (r.settings["loss"], r.settings["loss_chunks"]) == ("chunked", 16)
    # the CCE plugin switched off by its own key
    r = vramwise.read_recipe({**BASE, "plugins": ["axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"],
                              "cut_cross_entropy": False})
    assert r.settings["loss"] == "standard"
    # torch_compile: auto resolves to True on torch >= 2.5.1 (config.py:2043-2053)
    assert vramwise.read_recipe({**BASE, "torch_compile": "auto"}).settings["compile"] is True


# -- bad recipes --------------------------------------------------------------------------------

def test_unknown_key_warns(tmp_path):
    path = write_recipe(tmp_path, "base_model: meta-llama/Llama-3.2-1B-Instruct\nmicro_batch_size: 2\n"
                                  "micro_batch_sise: 4\n")
    r = vramwise.read_recipe(path)
    assert r.settings["batch_size"] == 2
    assert any(f"{path}:3" in w and "micro_batch_sise" in w and "unknown axolotl key" in w for w in r.warnings)


def test_wrong_type_fails_with_file_line_and_key(tmp_path):
    path = write_recipe(tmp_path, "base_model: meta-llama/Llama-3.2-1B-Instruct\nsequence_len: 2048\n"
                                  "micro_batch_size: two\n")
    with pytest.raises(RecipeError) as e:
        vramwise.read_recipe(path)
    assert f"{path}:3" in str(e.value) and "micro_batch_size" in str(e.value)


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="the deepspeed format (frameworks/deepspeed.yaml) is not bundled yet")
def test_missing_deepspeed_file_fails_naming_it(tmp_path):
    path = write_recipe(tmp_path, "base_model: meta-llama/Llama-3.2-1B-Instruct\n"
                                  "deepspeed: deepspeed_configs/zero9.json\n")
    with pytest.raises(RecipeError) as e:
        vramwise.read_recipe(path)
    assert f"{path}:2" in str(e.value) and "zero9.json" in str(e.value)


# -- writing advice back ------------------------------------------------------------------------

def test_changes_are_written_in_axolotl_keys():
    r = read("llama-3-lora-1b.yml")
    assert r.write({"batch_size": 1, "gradient_accumulation_steps": 4}) == {
        "micro_batch_size": 1, "gradient_accumulation_steps": 4}
    assert r.write({"method": "qlora"}) == {"adapter": "qlora", "load_in_4bit": True, "load_in_8bit": False}
    assert r.write({"lora_rank": 8, "seq_len": 1024}) == {"lora_r": 8, "sequence_len": 1024}
    assert r.write({"gradient_checkpointing": "true"}) == {"gradient_checkpointing": True}
    assert r.write({"optimizer": "paged_adamw_8bit"}) == {"optimizer": "paged_adamw_8bit"}
    assert r.write({"target_modules": "all-linear"}) == {"lora_target_linear": True}


# -- what the settings table says: a target keyword expanded on the model, a renamed optimizer -----------------

# PEFT's all-linear (peft/tuners/tuners_utils.py _maybe_include_all_linear_layers) targets every nn.Linear but the
# output layer. LlamaForCausalLM (transformers models/llama/modeling_llama.py) has as nn.Linear: LlamaAttention's
# q_proj, k_proj, v_proj, o_proj; LlamaMLP's gate_proj, up_proj, down_proj; and lm_head, the output layer. In
# sorted order, as the estimate lists its targets:
LLAMA_ALL_LINEAR = ("down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj")
LLAMA_1B = "meta-llama/Llama-3.2-1B-Instruct"  # in the model catalog: no hub needed


def test_lora_target_linear_is_shown_with_the_modules_it_adapts(tmp_path):
    from vramwise.surfaces.cli.common import recipe_lines

    path = write_recipe(tmp_path, f"base_model: {LLAMA_1B}\nadapter: lora\nlora_r: 8\nlora_target_linear: true\n"
                                  "micro_batch_size: 1\nsequence_len: 512\noptimizer: adamw_bnb_8bit\n")
    r = vramwise.read_recipe(path)
    assert r.settings["target_modules"] == ("all-linear",)  # the keyword, as read (adapter.py:174-182)
    e = vramwise.estimate(r)
    assert e.lora_targets == LLAMA_ALL_LINEAR
    expanded = "all-linear (adapts: " + ",".join(LLAMA_ALL_LINEAR) + ")"
    assert r.shown("target_modules", e.lora_targets) == expanded
    assert r.shown("target_modules") == "all-linear"  # no estimate, no expansion
    lines = recipe_lines(r, lora_targets=e.lora_targets)
    # the table: the expanded modules beside the keyword, with the origin (line 4: lora_target_linear)
    line = next(x for x in lines if x.lstrip().startswith("target_modules"))
    assert expanded in line and line.endswith(f"{path}:4 lora_target_linear")
    # adamw_bnb_8bit (line 7) is transformers' other name of adamw_8bit (training_args.py:129-130)
    line = next(x for x in lines if x.lstrip().startswith("optimizer"))
    assert "adamw_8bit (recipe: adamw_bnb_8bit)" in line and line.endswith(f"{path}:7 optimizer")
    # the JSON says the same
    d = r.to_dict(e.lora_targets)
    assert d["shown"]["target_modules"] == expanded and d["shown"]["optimizer"] == "adamw_8bit (recipe: adamw_bnb_8bit)"
    assert d["origins"]["optimizer"]["written"] == "adamw_bnb_8bit"


def test_named_targets_are_shown_as_written(tmp_path):
    # lora_target_modules names the modules: nothing to expand (the adapted set is the named one)
    path = write_recipe(tmp_path, f"base_model: {LLAMA_1B}\nadapter: lora\nlora_r: 8\n"
                                  "lora_target_modules: [q_proj, v_proj]\noptimizer: adamw_torch\n")
    r = vramwise.read_recipe(path)
    e = vramwise.estimate(r)
    assert e.lora_targets == ("q_proj", "v_proj")
    assert r.shown("target_modules", e.lora_targets) == "q_proj,v_proj"
    assert r.shown("optimizer") == "adamw_torch"  # not renamed: no alias
