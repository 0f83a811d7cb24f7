"""The stacks manifest (formulas/stacks.yaml): the one list of training stacks, their modules and
profiles, and what measure runs in place of a recipe's setting it cannot run here."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest

import vramwise
from vramwise.errors import FileFormatError
from vramwise.models.stack_manifest import compile_manifest, stack_manifest
from vramwise.rules.datafiles import load_data_file, load_schema

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "formulas" / "stacks.yaml"


def test_the_manifest_is_valid_against_its_schema():
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(load_schema("stacks-1.schema.json"))
    df = load_data_file(MANIFEST.read_text(encoding="utf-8"), "formulas/stacks.yaml", "stacks-1.schema.json")
    assert compile_manifest(df) == stack_manifest()


def test_every_reader_of_the_stacks_sees_the_manifest_in_its_order():
    from vramwise.measuring.stacks.registry import STACK_MODULES
    from vramwise.profiles.settings import STACKS
    from vramwise.surfaces.cli.parser import build_parser

    # the order and names --stack has always offered: the default transformers stack, then the extras
    assert tuple(STACKS) == ("hf", "torchtune", "litgpt") == stack_manifest().names
    assert tuple(STACK_MODULES) == tuple(STACKS)
    measure = build_parser()._subparsers._group_actions[0].choices["measure"]
    stack_flag = next(a for a in measure._actions if "--stack" in a.option_strings)
    assert list(stack_flag.choices) == ["hf", "torchtune", "litgpt"] and stack_flag.default == stack_manifest().default


def test_each_stack_module_is_modelled_by_the_first_profile_it_runs():
    from vramwise.measuring.stacks.registry import STACK_MODULES

    for name, stack in stack_manifest().stacks.items():
        module = STACK_MODULES[name]
        assert module.__name__ == f"vramwise.measuring.stacks.{stack.module}"
        assert module.PROFILE == stack.profiles[0], name
        assert vramwise.Registry.default().profile(module.PROFILE).name == module.PROFILE


def test_an_unknown_stack_is_one_line_naming_the_choices():
    from vramwise.measuring.stacks.registry import stack_module

    with pytest.raises(vramwise.SettingsError) as info:
        stack_module("axolotl")
    assert str(info.value) == "unknown stack 'axolotl' (choose one of: hf, torchtune, litgpt)"


def test_measure_offers_the_values_the_manifest_says_it_runs():
    from vramwise.profiles.settings import TRAINING_METHODS
    from vramwise.surfaces.cli.parser import CommandLineError, build_parser

    # measure runs training steps (vramwise.measuring.steps refuses inference: "choose qlora, lora or full"); the
    # stacks' losses are their own standard one and the chunked ones of torchtune (CEWithChunkedOutputLoss) and
    # LitGPT (chunked_cross_entropy), a fused one runs as standard (substitutions)
    runnable = stack_manifest().runnable
    assert runnable == {"method": ("qlora", "lora", "full"), "loss": ("standard", "chunked")}
    assert runnable["method"] == TRAINING_METHODS
    measure = build_parser()._subparsers._group_actions[0].choices["measure"]
    flags = {a.option_strings[0]: a for a in measure._actions if a.option_strings}
    assert list(flags["--method"].choices) == ["qlora", "lora", "full"]
    assert list(flags["--loss"].choices) == ["standard", "chunked"] and flags["--loss"].default == "standard"
    with pytest.raises(CommandLineError, match=r"^argument --loss: invalid choice: 'fused' \(choose from 'standard', 'chunked'\)$"):
        measure.parse_args(["m.json", "--loss", "fused"])


def test_vramwise_check_finds_a_value_of_the_manifest_its_setting_lacks(tmp_path):
    assert vramwise.check([MANIFEST]) == []
    folder = tmp_path / "formulas"
    folder.mkdir()
    p = folder / "stacks.yaml"
    p.write_text(BASE.replace("    names: [qlora, lora, full]\n", "    names: [qlora, dora, full]\n", 1)
                 .replace("      runs: sdpa\n", "      runs: spda\n", 1), encoding="utf-8")
    lines = p.read_text(encoding="utf-8").splitlines()
    dora = next(f"{i}:{line.index('dora') + 1}" for i, line in enumerate(lines, 1) if "dora" in line)
    spda = next(f"{i}:{line.index('spda') + 1}" for i, line in enumerate(lines, 1) if "spda" in line)
    assert vramwise.check([p]) == [
        f"{p}:{dora}: $.runnable.method.names[1]: 'dora' is not one of method's choices (qlora, lora, full, inference)",
        f"{p}:{spda}: $.substitutions.attention.flash_attention_2.runs: 'spda' is not one of attention's choices "
        "(flash_attention_2, flash_attention_3, sdpa, flex_attention, eager)"]


def test_a_recipe_runs_on_the_stack_of_its_profile():
    m = stack_manifest()
    assert m.stack_of_profile("torchtune") == "torchtune"
    assert m.stack_of_profile("litgpt") == "litgpt"
    # every other profile (unsloth, hf, vllm, size_only) runs on transformers + PEFT
    for profile in ("hf", "unsloth", "vllm", None):
        assert m.stack_of_profile(profile) == "hf"


def test_each_substitution_swaps_a_choice_for_another_choice_of_the_same_setting():
    from vramwise.profiles.settings import SETTINGS

    choices = {s.name: tuple(s.choices) for s in SETTINGS if s.choices}
    subs = stack_manifest().substitutions
    assert {(s.setting, s.value, s.runs) for s in subs.values()} == {
        ("gradient_checkpointing", "unsloth", "true"), ("loss", "fused", "standard"),
        ("loss", "linear_chunked", "chunked"),  # torchtune 0.6.1 has no LinearCrossEntropyLoss
        ("attention", "flash_attention_2", "sdpa"), ("attention", "flash_attention_3", "sdpa"),
        ("attention", "flex_attention", "sdpa")}
    for sub in subs.values():
        assert sub.value in choices[sub.setting] and sub.runs in choices[sub.setting] and sub.value != sub.runs
        assert sub.reason


def test_measure_says_what_it_runs_in_place_of_a_recipes_setting(tmp_path, monkeypatch):
    from vramwise.surfaces.cli import measure

    recipe = Namespace(model="org/m", profile="litgpt", path=None,
                       settings={**{k: None for k in ("target_modules", "lora_dropout", "loss_chunks", "activation_offloading",
                                                      "optimizer_in_bwd", "kbit_prepare", "offload", "world_size")},
                                 "method": "lora", "batch_size": 1, "seq_len": 8, "lora_rank": 4, "optimizer": "adamw_torch",
                                 "gradient_checkpointing": "unsloth", "attention": "flex_attention", "loss": "fused",
                                 "strategy": "none"})
    monkeypatch.setattr("vramwise.surfaces.cli.common.recipe_of", lambda args: recipe)
    args = Namespace(model=None, given_flags=set(), stack="hf",
                     **{k: None for k in (*measure._MEASURE_DEFAULTS, *measure._RECIPE_FLAGS)})
    changed = measure._apply_recipe(args)
    assert changed == ["gradient checkpointing true (the recipe's unsloth is not runnable here)",
                       "attention sdpa (the recipe's flex_attention is not runnable here)",
                       "loss standard (the recipe's fused is not runnable here)"]
    assert (args.gradient_checkpointing, args.attention, args.loss, args.stack) == ("true", "sdpa", "standard", "litgpt")



def test_measure_runs_the_chunked_loss_for_a_linear_cross_entropy_recipe(monkeypatch):
    # a config of torchtune's main branch after 0.6.1: LinearCrossEntropyLoss is not in the 0.6.1 that measure runs
    from vramwise.surfaces.cli import measure

    recipe = vramwise.read_recipe(str(ROOT / "tests" / "fixtures" / "recipes" / "torchtune" / "main"
                                      / "llama3_1_8B_lora_single_device.yaml"))
    args = Namespace(model=None, given_flags=set(), stack=None,
                     **{k: None for k in (*measure._MEASURE_DEFAULTS, *measure._RECIPE_FLAGS)})
    monkeypatch.setattr("vramwise.surfaces.cli.common.recipe_of", lambda args: recipe)
    changed = measure._apply_recipe(args)
    assert "loss chunked (the recipe's linear_chunked is not runnable here)" in changed
    assert (args.loss, args.loss_chunks, args.stack) == ("chunked", 8, "torchtune")


def _manifest(tmp_path, text):
    return load_data_file(text, str(tmp_path / "stacks.yaml"), "stacks-1.schema.json")


BASE = MANIFEST.read_text(encoding="utf-8")


@pytest.mark.parametrize("old,new,needle", [
    ("    profiles: [litgpt]\n", "    profiles: [torchtune]\n", "$.stacks.litgpt.profiles[0]: profile 'torchtune' is already run by stack 'torchtune'"),
    ("facts_prefix: litgpt_", "facts_prefix: torchtune_", "$.stacks.litgpt.facts_prefix: facts prefix 'torchtune_' overlaps stack 'torchtune'"),
    ("default: hf", "default: axolotl", "$.default: unknown stack 'axolotl' (known: hf, torchtune, litgpt)"),
    ("    names: [standard, chunked]\n", "    names: [standard, chunked, fused]\n",
     "$.substitutions.loss.fused: loss fused is runnable ($.runnable.loss): nothing to substitute"),
    ("    names: [standard, chunked]\n", "    names: [chunked]\n",
     "$.substitutions.loss.fused.runs: loss standard is not runnable (runnable: chunked)"),
])
def test_a_broken_manifest_is_named_with_its_position(tmp_path, old, new, needle):
    assert old in BASE
    with pytest.raises(FileFormatError) as info:
        compile_manifest(_manifest(tmp_path, BASE.replace(old, new, 1)))
    assert f"{tmp_path / 'stacks.yaml'}:" in str(info.value) and needle in str(info.value)


def test_an_unknown_key_of_a_substitution_fails_the_schema(tmp_path):
    text = BASE.replace("      runs: standard\n", "      runs: standard\n      why: x\n", 1)
    with pytest.raises(FileFormatError) as info:
        _manifest(tmp_path, text)
    assert "$.substitutions.loss.fused.why: unknown key 'why'" in str(info.value)


def test_each_stack_trains_on_several_gpus_with_strategies_measure_runs():
    from vramwise.measuring.strategies import STRATEGIES

    m = stack_manifest()
    for stack in m.stacks.values():
        assert set(stack.strategies) <= set(STRATEGIES), stack.name
    # torchtune 0.6.1's distributed recipes shard with FSDP2 only (training.shard_model); LitGPT's
    # finetune scripts are measured on one device
    assert m.stacks["torchtune"].strategies == ("fsdp", "fsdp_shard_grad_op")
    assert m.stacks["litgpt"].strategies == ()


def test_a_strategy_a_stack_does_not_train_with_is_refused_naming_those_it_does():
    from vramwise.measuring.distributed import check_distributed

    with pytest.raises(vramwise.SettingsError) as info:
        check_distributed("ddp", 2, device="cpu", fake=False, stack="torchtune", method="lora")
    assert str(info.value) == "strategy ddp is not how stack torchtune trains on several GPUs (it runs: fsdp, fsdp_shard_grad_op)"
    with pytest.raises(vramwise.SettingsError) as info:
        check_distributed("fsdp", 2, device="cpu", fake=False, stack="litgpt", method="lora")
    assert str(info.value).endswith("(it runs on one device only)")


def test_the_stacks_packages_are_those_a_step_failure_is_blamed_on():
    from vramwise.measuring.refusals import STACK_PACKAGES

    # the packages each stack's module imports to build and step its model
    assert set(STACK_PACKAGES) == {"transformers", "peft", "bitsandbytes", "torchtune", "litgpt"}
