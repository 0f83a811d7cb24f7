"""The LitGPT finetune recipe format (frameworks/litgpt.yaml), against values read off the recipes by hand.

Fixtures: tests/fixtures/recipes/litgpt/, recipes of litgpt v0.5.9's config_hub/finetune copied verbatim
below a first ``# source:`` line, so a key's line in a fixture is its config_hub line plus one. Defaults:
litgpt 0.5.9 (the installed package), cited at each case: finetune/lora.py and finetune/full.py setup(),
args.py TrainArgs, utils.py. LitGPT's own parser reads the same fixtures in
tests/conformance/recipe_formats/test_litgpt.py.
"""

from pathlib import Path

import pytest

import vramwise

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "litgpt"
CKPT = "checkpoints/meta-llama/Meta-Llama-3.1-8B"
# LitGPT's six LoRA switches (finetune/lora.py:58-63) and the modules each adapts in a llama-style model
# (LLaMAMLP's fc_1, fc_2, proj are gate_proj, up_proj, down_proj)
SWITCH_NAMES = ("query", "key", "value", "projection", "mlp", "head")
ALL_SIX = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


def read(name_or_mapping, **kw):
    if isinstance(name_or_mapping, str):
        return vramwise.read_recipe(FIXTURES / name_or_mapping, **kw)
    return vramwise.read_recipe(name_or_mapping, **kw)


def origin(recipe, name):
    o = recipe.origins[name]
    if o.kind == "recipe":
        return ("recipe", o.key, o.line)
    if o.kind == "framework default":
        return ("framework default", o.framework, o.version)
    return (o.kind,)


# A recipe is read under the newest release the format knows, 0.5.13; each default cited here is the same at
# v0.5.9 and v0.5.13 (git diff of the two tags: finetune/lora.py moved one line down, its defaults unchanged),
# so the values are 0.5.9's and the origin names 0.5.13.
FW = ("framework default", "litgpt", "0.5.13")
# The settings every single-device fixture shares, read off each file by hand:
# - gradient_checkpointing none: one device runs strategy "auto", no activation checkpointing
#   (finetune/lora.py:162-163, full.py:114-115);
# - loss chunked: fit() calls chunked_cross_entropy (chunk_size 128; lora.py:335-338, full.py:283);
# - strategy none: devices 1 and num_nodes 1 (lora.py:149, 163);
# - optimizer adamw_torch: `optimizer: class_path: torch.optim.AdamW` (utils.py:607-620 imports it; torch's
#   AdamW without fused=True).
ONE_DEVICE = {"gradient_checkpointing": ("none", FW), "loss": ("chunked", FW), "strategy": ("none", FW)}

# fixture -> (model, {setting: (value, origin)}, {extra: value}); line numbers counted in the fixture files.
CASES = {
    "llama-3.1-8b-lora.yaml": (
        # line 3: checkpoint_dir checkpoints/meta-llama/Meta-Llama-3.1-8B -> last two parts; the hub renamed the
        # repository meta-llama/Llama-3.1-8B (the format's map)
        "meta-llama/Llama-3.1-8B",
        {
            "method": ("lora", ("recipe", "lora_r", 21)),  # lora_r: 32 (line 21) is a finetune/lora.py key; quantize: (null)
            "batch_size": (1, ("recipe", "train.micro_batch_size", 69)),
            "seq_len": (512, ("recipe", "train.max_seq_length", 84)),
            "lora_rank": (32, ("recipe", "lora_r", 21)),
            "lora_dropout": (0.05, ("recipe", "lora_dropout", 27)),
            # lora_query true (30), lora_key false, lora_value true, projection/mlp/head false
            "target_modules": (("q_proj", "v_proj"), ("recipe", "lora_query", 30)),
            "optimizer": ("adamw_torch", ("recipe", "optimizer.class_path", 120)),
            "world_size": (1, ("recipe", "devices", 15)),
            **ONE_DEVICE,
        },
        # global_batch_size 8 // (devices 1 * num_nodes 1) // micro_batch_size 1 = 8 (args.py:55-65)
        {"gradient_accumulation_steps": 8, "global_batch_size": 8, "num_nodes": 1},
    ),
    "llama-3.1-8b-qlora.yaml": (
        "meta-llama/Llama-3.1-8B",
        {
            "method": ("qlora", ("recipe", "quantize", 12)),  # quantize: bnb.nf4 (line 12)
            "batch_size": (2, ("recipe", "train.micro_batch_size", 71)),
            "seq_len": (512, ("recipe", "train.max_seq_length", 86)),
            "lora_rank": (32, ("recipe", "lora_r", 21)),
            "lora_dropout": (0.05, ("recipe", "lora_dropout", 27)),
            "target_modules": (("q_proj", "v_proj"), ("recipe", "lora_query", 30)),
            # optimizer.class_path torch.optim.AdamW (line 122), but quantize bnb.nf4 (line 12) makes LitGPT build
            # bnb.optim.PagedAdamW instead (lora.py:138-146, 213-215; utils.py:572-586): two float32 states, paged
            "optimizer": ("paged_adamw_32bit", ("recipe", "quantize", 12)),
            "world_size": (1, ("recipe", "devices", 15)),
            **ONE_DEVICE,
        },
        {"gradient_accumulation_steps": 4, "global_batch_size": 8, "num_nodes": 1},  # 8 // 1 // 2
    ),
    "mistral-7b-qlora.yaml": (
        "mistralai/Mistral-7B-v0.1",  # line 3: checkpoints/mistralai/Mistral-7B-v0.1
        {
            "method": ("qlora", ("recipe", "quantize", 12)),
            "batch_size": (2, ("recipe", "train.micro_batch_size", 71)),
            "seq_len": (512, ("recipe", "train.max_seq_length", 86)),
            "lora_rank": (32, ("recipe", "lora_r", 21)),
            "target_modules": (("q_proj", "v_proj"), ("recipe", "lora_query", 30)),
            "world_size": (1, ("recipe", "devices", 15)),
            **ONE_DEVICE,
        },
        {"gradient_accumulation_steps": 4, "global_batch_size": 8, "num_nodes": 1},  # 8 // 1 // 2
    ),
    "phi-3-lora.yaml": (
        "microsoft/Phi-3-mini-4k-instruct",
        {
            "method": ("lora", ("recipe", "lora_r", 18)),
            "batch_size": (4, ("recipe", "train.micro_batch_size", 67)),
            "lora_rank": (8, ("recipe", "lora_r", 18)),
            # all six switches true; the origin is the first switch written, lora_query (line 27)
            "target_modules": (ALL_SIX, ("recipe", "lora_query", 27)),
            # no num_nodes key: setup's num_nodes=1 (lora.py:54), so world_size is devices (line 15)
            "world_size": (1, ("recipe", "devices", 15)),
            **ONE_DEVICE,
        },
        {"gradient_accumulation_steps": 2, "global_batch_size": 8, "num_nodes": 1},  # 8 // 1 // 4
    ),
    "llama-3.2-3B-full.yaml": (
        "meta-llama/Llama-3.2-3B",
        {
            # no quantize, lora_* or resume key: finetune_full's recipe (full.py:43-66), a framework default
            "method": ("full", FW),
            "batch_size": (4, ("recipe", "train.micro_batch_size", 45)),
            "seq_len": (512, ("recipe", "train.max_seq_length", 60)),
            "optimizer": ("adamw_torch", ("recipe", "optimizer.class_path", 96)),
            "world_size": (1, ("recipe", "devices", 12)),
            "lora_rank": (16, ("vramwise default",)),  # full.py has no lora_r
            "target_modules": (None, ("vramwise default",)),
            **ONE_DEVICE,
        },
        {"gradient_accumulation_steps": 16, "global_batch_size": 64, "num_nodes": 1},  # 64 // 1 // 4
    ),
    "llama-3.1-8b-full.yaml": (
        "meta-llama/Llama-3.1-8B",
        {
            "method": ("full", ("recipe", "resume", 21)),  # resume: false (line 21), a finetune/full.py key
            "batch_size": (4, ("recipe", "train.micro_batch_size", 45)),
            # devices: 4 (line 12): FSDPStrategy with activation_checkpointing_policy={Block} (full.py:106-113)
            "strategy": ("fsdp", ("recipe", "devices", 12)),
            "world_size": (4, ("recipe", "devices", 12)),
            "gradient_checkpointing": ("true", ("recipe", "devices", 12)),
            "loss": ("chunked", FW),
            "optimizer": ("adamw_torch", ("recipe", "optimizer.class_path", 96)),
        },
        # per device: 64 // (devices 4 * num_nodes 1) // micro_batch_size 4 = 4 (args.py:55-65)
        {"global_batch_size": 64, "gradient_accumulation_steps": 4, "num_nodes": 1},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_settings_and_origins(name):
    model, settings, extras = CASES[name]
    r = read(name)
    assert r.format == "litgpt" and r.framework == "litgpt" and r.framework_version == "0.5.13"
    assert r.model == model
    assert origin(r, "model") == ("recipe", "checkpoint_dir", 3)
    for setting, (value, where) in settings.items():
        assert (setting, r.settings[setting]) == (setting, value)
        assert (setting, origin(r, setting)) == (setting, where)
    assert r.extras == extras


@pytest.mark.parametrize("name", sorted(n for n in CASES if n != "llama-3.1-8b-full.yaml"))
def test_single_device_fixtures_read_cleanly(name):
    # precision bf16-true and train.max_seq_length given, every other key known: no warning
    r = read(name)
    assert r.profile == "litgpt"
    assert r.warnings == ()


def test_several_devices_fsdp_stays_on_the_litgpt_profile():
    r = read("llama-3.1-8b-full.yaml")
    # the litgpt profile models Fabric's FSDPStrategy, which litgpt finetune runs on several devices
    assert (r.profile, r.settings["strategy"]) == ("litgpt", "fsdp")
    assert not any("does not model strategy" in w for w in r.warnings)
    assert vramwise.estimate(r).strategy == "fsdp"


def test_framework_defaults_with_their_source():
    r = read({"checkpoint_dir": CKPT, "lora_r": 16, "precision": "bf16-true", "train": {"max_seq_length": 256}})
    assert r.format == "litgpt"  # detected from checkpoint_dir and lora_r
    assert (r.settings["method"], origin(r, "method")) == ("lora", ("recipe", "lora_r", None))
    expected = {
        # setup's train=TrainArgs(micro_batch_size=1) (lora.py:69), not TrainArgs' own 4 (args.py:18)
        "batch_size": (1, "lora.py:69"),
        "lora_dropout": (0.05, "lora.py:57"),  # lora_dropout: float = 0.05
        "target_modules": (("q_proj", "v_proj"), "lora.py:58-63"),  # lora_query=True, lora_value=True
        "optimizer": ("adamw_torch", "lora.py:76"),  # optimizer="AdamW" -> torch.optim.AdamW
        "gradient_checkpointing": ("none", "lora.py:162-163"),  # strategy "auto"
        "loss": ("chunked", "lora.py:335-338"),  # chunked_cross_entropy, chunk 128
        "strategy": ("none", "lora.py:53-54"),
        "world_size": (1, "lora.py:53-54"),  # devices=1, num_nodes=1
    }
    for name, (value, source) in expected.items():
        assert (name, r.settings[name], origin(r, name)) == (name, value, FW)
        assert source in r.origins[name].source, (name, r.origins[name].source)
    assert r.extras == {"global_batch_size": 16, "gradient_accumulation_steps": 16, "num_nodes": 1}
    assert "lora.py:68" in r.origins["global_batch_size"].source  # global_batch_size=16
    assert "lora.py:68-69" in r.origins["gradient_accumulation_steps"].source  # 16 // 1 // 1
    assert "lora.py:54" in r.origins["num_nodes"].source
    assert r.warnings == ()


def test_lora_rank_default_of_a_recipe_with_other_lora_keys():
    r = read({"checkpoint_dir": CKPT, "quantize": "bnb.nf4", "precision": "bf16-true",
              "train": {"max_seq_length": 256}})
    assert r.settings["method"] == "qlora"
    assert (r.settings["lora_rank"], origin(r, "lora_rank")) == (8, FW)  # lora_r: int = 8 (lora.py:55)
    assert "lora.py:55" in r.origins["lora_rank"].source


def test_a_recipe_without_lora_keys_is_full_finetuning():
    r = read({"checkpoint_dir": CKPT, "precision": "bf16-true", "train": {"max_seq_length": 256, "micro_batch_size": 2}})
    assert (r.settings["method"], origin(r, "method")) == ("full", FW)
    assert "full.py:43" in r.origins["method"].source
    assert origin(r, "lora_rank") == ("vramwise default",)
    assert origin(r, "target_modules") == ("vramwise default",)
    # global_batch_size left to its default 16 while micro_batch_size is set: 16 // 2 would need a constant
    # divided by a key, which no rule expresses; the extra is not given
    assert "gradient_accumulation_steps" not in r.extras


@pytest.mark.parametrize("switches, targets, key", [
    ({"lora_query": False, "lora_mlp": True}, ("v_proj", "gate_proj", "up_proj", "down_proj"), "lora_query"),
    ({"lora_key": True}, ("q_proj", "k_proj", "v_proj"), "lora_key"),
    ({"lora_value": False, "lora_head": True}, ("q_proj", "lm_head"), "lora_value"),
    ({"lora_projection": True, "lora_mlp": True}, ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
     "lora_projection"),
    ({"lora_query": True, "lora_value": True, "lora_key": False}, ("q_proj", "v_proj"), "lora_query"),
])
def test_lora_switches_give_the_modules_they_adapt(switches, targets, key):
    # absent switches take setup's defaults: query and value on, key/projection/mlp/head off (lora.py:58-63)
    r = read({"checkpoint_dir": CKPT, **switches})
    assert r.settings["target_modules"] == targets
    assert origin(r, "target_modules") == ("recipe", key, None)


def test_target_names_are_the_litgpt_profiles_own_switch_sets():
    # formulas/litgpt/profile.yaml lora.target_sets names each LitGPT switch by the modules it adapts: the
    # names the format writes give the same adapters as the switches' names
    kw = dict(profile="litgpt", method="lora", batch_size=1, seq_len=128, gradient_checkpointing="none",
              optimizer="adamw_torch", loss="chunked")
    switches = vramwise.estimate("meta-llama/Llama-3.1-8B", target_modules=SWITCH_NAMES, **kw)  # untied head
    modules = vramwise.estimate("meta-llama/Llama-3.1-8B", target_modules=ALL_SIX, **kw)
    assert switches.params_trainable == modules.params_trainable > 0
    assert set(modules.lora_targets) == set(ALL_SIX)


def test_an_fsdp_lora_recipe_keeps_its_targets():
    r = read({"checkpoint_dir": CKPT, "devices": 2, "lora_r": 8, "lora_mlp": True, "precision": "bf16-true",
              "train": {"max_seq_length": 512}})
    assert r.profile == "litgpt"
    e = vramwise.estimate(r)
    assert set(e.lora_targets) == {"q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"}


@pytest.mark.parametrize("optimizer, expected, key", [
    ("AdamW", "adamw_torch", "optimizer"),  # a name without a dot: torch.optim.AdamW (utils.py:595-600)
    ("SGD", "sgd", "optimizer"),
    ("bitsandbytes.optim.AdamW8bit", "adamw_8bit", "optimizer"),  # a dotted name is imported
    ({"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-4, "fused": True}}, "adamw_torch_fused",
     "optimizer.init_args.fused"),
    ({"class_path": "bitsandbytes.optim.PagedAdamW8bit", "init_args": {"lr": 1e-4}}, "paged_adamw_8bit",
     "optimizer.class_path"),
])
def test_optimizer_name_or_class_path(optimizer, expected, key):
    r = read({"checkpoint_dir": CKPT, "optimizer": optimizer})
    assert r.settings["optimizer"] == expected
    assert origin(r, "optimizer") == ("recipe", key, None)


@pytest.mark.parametrize("checkpoint_dir, model", [
    ("checkpoints/meta-llama/Meta-Llama-3.1-70B", "meta-llama/Llama-3.1-70B"),  # renamed on the hub
    ("/data/litgpt/checkpoints/Qwen/Qwen3-8B/", "Qwen/Qwen3-8B"),  # the last two parts of any path
    ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),  # a hub id (utils.py auto_download_checkpoint)
    ("checkpoints/mistralai/Mistral-7B-v0.1", "mistralai/Mistral-7B-v0.1"),
])
def test_model_from_checkpoint_dir(checkpoint_dir, model):
    assert read({"checkpoint_dir": checkpoint_dir}).model == model


def test_a_one_part_checkpoint_dir_is_a_folder_beside_the_recipe(tmp_path):
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text('{"model_type": "llama"}')
    recipe = tmp_path / "lora.yaml"
    recipe.write_text("checkpoint_dir: my-model\nlora_r: 4\n")
    assert read(str(recipe)).model == str(tmp_path / "my-model")


def _warned(recipe, key):
    return [w for w in recipe.warnings if f" {key}" in w and "not modelled" in w]


@pytest.mark.parametrize("extra, key", [
    ({"precision": "bf16-mixed"}, "precision"),  # float32 weights under autocast; the profile models bf16-true
    ({"precision": "32-true"}, "precision"),
    ({}, "precision"),  # unset: bf16-mixed on a bf16 GPU (utils.py:359-376, lora.py:128)
    ({"quantize": "bnb.nf4-dq", "precision": "bf16-true"}, "quantize"),  # double quantization
    ({"quantize": "bnb.int8-training", "precision": "bf16-true"}, "quantize"),  # 8-bit weights
    ({"devices": "auto", "precision": "bf16-true"}, "devices"),  # every visible GPU (utils.py:532-534)
    ({"devices": 2, "quantize": "bnb.nf4", "precision": "bf16-true"}, "quantize"),  # lora.py:149-154 refuses
    ({"precision": "bf16-true", "optimizer": {"class_path": "torch.optim.SGD", "init_args": {"momentum": 0.9}}},
     "optimizer.init_args.momentum"),
    ({"precision": "bf16-true", "lora_query": False, "lora_value": False}, "lora_query"),  # no adapter at all
])
def test_unmodelled_keys_are_named(extra, key):
    r = read({"checkpoint_dir": CKPT, "lora_r": 8, "train": {"max_seq_length": 256}, **extra})
    assert len(_warned(r, key)) == 1, r.warnings


def test_max_seq_length_unset_warns_and_leaves_vramwise_default():
    # None: LitGPT trains on the data's longest sample, up to block_size (lora.py:294, model.py:49-51)
    r = read({"checkpoint_dir": CKPT, "precision": "bf16-true", "lora_r": 8})
    assert (r.settings["seq_len"], origin(r, "seq_len")) == (2048, ("vramwise default",))
    assert len(_warned(r, "train.max_seq_length")) == 1


def test_quantize_variants_and_devices():
    base = {"checkpoint_dir": CKPT, "precision": "bf16-true", "train": {"max_seq_length": 256}}
    assert read({**base, "quantize": "bnb.nf4-dq"}).settings["method"] == "qlora"
    assert read({**base, "quantize": "bnb.fp4"}).settings["method"] == "qlora"  # 4-bit too
    assert read({**base, "quantize": "bnb.int8-training"}).settings["method"] == "lora"
    auto = read({**base, "lora_r": 8, "devices": "auto"})
    assert (auto.settings["strategy"], auto.settings["world_size"]) == ("none", 1)
    assert origin(auto, "world_size") == ("vramwise default",)
    nodes = read({**base, "lora_r": 8, "devices": 4, "num_nodes": 2, "train": {"global_batch_size": 64,
                                                                          "micro_batch_size": 2}})
    # FSDP on devices 4 * num_nodes 2 = 8 ranks (lora.py:149); per rank 64 // 8 // 2 = 4 accumulation steps
    assert nodes.settings["strategy"] == "fsdp" and nodes.settings["world_size"] == 8
    assert origin(nodes, "world_size")[:2] == ("recipe", "devices")
    assert nodes.extras["gradient_accumulation_steps"] == 4
    # LitGPT rounds down: 10 // 4 // 1 = 2 (args.py:57-63), not an error
    odd = read({**base, "lora_r": 8, "devices": 4, "train": {"global_batch_size": 10, "micro_batch_size": 1}})
    assert odd.extras["gradient_accumulation_steps"] == 2


def test_unknown_key_is_a_warning():
    r = read({"checkpoint_dir": CKPT, "lora_rank": 16, "precision": "bf16-true", "train": {"max_seq_length": 64}})
    assert [w for w in r.warnings if "unknown litgpt key 'lora_rank'" in w]


def test_changes_are_written_in_litgpt_keys():
    r = read("llama-3.1-8b-lora.yaml")
    assert r.write({"batch_size": 2}) == {"train.micro_batch_size": 2}
    assert r.write({"seq_len": 1024}) == {"train.max_seq_length": 1024}
    assert r.write({"lora_rank": 8}) == {"lora_r": 8}
    # LitGPT refuses quantize with mixed precision (lora.py:139-140): the qlora change names bf16-true too
    assert r.write({"method": "qlora"}) == {"quantize": "bnb.nf4", "precision": "bf16-true"}
    assert r.write({"optimizer": "adamw_8bit"}) == {"optimizer.class_path": "bitsandbytes.optim.AdamW8bit"}
    assert r.write({"world_size": 2}) == {"devices": 2}


def test_estimate_of_a_recipe_is_the_estimate_of_its_settings():
    # llama-3.1-8b-lora.yaml by hand: micro_batch_size 1, max_seq_length 512, lora_r 32, lora_dropout 0.05,
    # query and value, torch AdamW, one device (no checkpointing), LitGPT's chunked loss
    by_hand = vramwise.estimate("meta-llama/Llama-3.1-8B", profile="litgpt", method="lora", batch_size=1, seq_len=512,
                                lora_rank=32, lora_dropout=0.05, target_modules=["q_proj", "v_proj"],
                                optimizer="adamw_torch", gradient_checkpointing="none", loss="chunked")
    assert vramwise.estimate(read("llama-3.1-8b-lora.yaml")).total == by_hand.total


# -- what LitGPT does to the recipe's optimizer under quantize ------------------------------------------------
# quantize bnb.* makes setup() use BitsandbytesPrecision (finetune/lora.py:138-146); main() then builds the
# optimizer with instantiate_bnb_optimizer (lora.py:213-215), which builds bnb.optim.PagedAdamW - bitsandbytes'
# 32-bit paged AdamW, vramwise's paged_adamw_32bit - for any optimizer whose name holds "AdamW" and raises for
# the others (utils.py:572-586).

def test_quantize_makes_litgpt_build_paged_adamw():
    r = read("llama-3.1-8b-qlora.yaml")  # quantize: bnb.nf4 (line 12), optimizer.class_path torch.optim.AdamW
    assert r.settings["optimizer"] == "paged_adamw_32bit"
    o = r.origins["optimizer"]
    assert origin(r, "optimizer") == ("recipe", "quantize", 12)
    # the origin names the rule: what LitGPT does, and where
    assert "PagedAdamW" in o.rule and "utils.py:572-586" in o.source
    assert o.describe().endswith(f"llama-3.1-8b-qlora.yaml:12 quantize: {o.rule}")
    assert o.written is None  # a rule's value, not a word of the recipe renamed


@pytest.mark.parametrize("optimizer", [
    None,  # no optimizer key: setup's "AdamW" (lora.py:76)
    "AdamW",
    "bitsandbytes.optim.AdamW8bit",  # "AdamW" is in the name: PagedAdamW all the same (utils.py:573-581)
    {"class_path": "torch.optim.AdamW", "init_args": {"lr": 2e-4, "fused": True}},  # fused is not PagedAdamW's
    {"class_path": "bitsandbytes.optim.PagedAdamW8bit"},
])
@pytest.mark.parametrize("quantize", ["bnb.nf4", "bnb.nf4-dq", "bnb.fp4", "bnb.int8-training"])
def test_every_adamw_under_bnb_quantize_is_paged_adamw(quantize, optimizer):
    recipe = {"checkpoint_dir": CKPT, "quantize": quantize, "precision": "bf16-true"}
    if optimizer is not None:
        recipe["optimizer"] = optimizer
    r = read(recipe)
    assert r.settings["optimizer"] == "paged_adamw_32bit"
    assert origin(r, "optimizer") == ("recipe", "quantize", None)


def test_without_quantize_the_recipes_optimizer_stands():
    assert read({"checkpoint_dir": CKPT, "lora_r": 8}).settings["optimizer"] == "adamw_torch"  # lora.py:76
    r = read({"checkpoint_dir": CKPT, "lora_r": 8, "optimizer": "bitsandbytes.optim.AdamW8bit"})
    assert r.settings["optimizer"] == "adamw_8bit" and r.origins["optimizer"].rule is None
    # a fixture without quantize keeps its torch.optim.AdamW (line 120)
    assert read("llama-3.1-8b-lora.yaml").settings["optimizer"] == "adamw_torch"


def test_a_non_adamw_optimizer_under_quantize_is_not_swapped():
    # LitGPT raises for it (utils.py:573-576): the recipe's SGD stands and the litgpt profile refuses it
    r = read({"checkpoint_dir": CKPT, "quantize": "bnb.nf4", "precision": "bf16-true", "optimizer": "SGD"})
    assert r.settings["optimizer"] == "sgd"
    e = vramwise.estimate(r)
    assert any("only accepts AdamW" in w for w in e.warnings)


def test_paged_adamw_is_charged_two_float32_states_per_adapter_parameter():
    # llama-3.1-8b-qlora.yaml: rank 32 (line 21) on q_proj and v_proj of Llama 3.1 8B (hidden 4096, 8 KV heads of
    # 128: v out 1024, 32 layers). LoRA A (r x in) + B (out x r) per module:
    #   q: 32 * (4096 + 4096) = 262,144; v: 32 * (4096 + 1024) = 163,840; per layer 425,984; x 32 = 13,631,488
    # PagedAdamW: two float32 states (bitsandbytes Optimizer2State, optim_bits 32) = 8 bytes each -> 109,051,904
    e = vramwise.estimate(read("llama-3.1-8b-qlora.yaml"))
    assert e.optimizer == 13_631_488 * 8 == 109_051_904
    assert not any("optimizer" in w for w in e.warnings)
    # bnb.int8-training (16-bit base in vramwise): the same PagedAdamW, at setup's lora_r 8 (lora.py:55) on q and v:
    #   q: 8 * 8192 = 65,536; v: 8 * 5120 = 40,960; x 32 layers = 3,407,872 params; x 8 bytes = 27,262,976, and no
    #   torch step temporaries (bitsandbytes' 32-bit update runs in place)
    r = read({"checkpoint_dir": CKPT, "quantize": "bnb.int8-training", "precision": "bf16-true"})
    e = vramwise.estimate(r)
    assert e.optimizer == 3_407_872 * 8 == 27_262_976
    assert not any("optimizer" in w for w in e.warnings)
