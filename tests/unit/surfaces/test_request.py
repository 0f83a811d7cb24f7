"""The one request reader (vramwise.surfaces.request): the command line's flags and a JSON body read into
the same Request, and each refusal both surfaces make, made once (one test per refusal)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import vramwise
from vramwise.errors import ConfigError, SettingsError
from vramwise.surfaces import request as rq
from vramwise.surfaces.cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[3]
LLAMA = str(ROOT / "examples" / "llama-3.1-8b.json")
CONFIG = json.loads(Path(LLAMA).read_text())
RECIPE = ROOT / "examples" / "recipes" / "trl-sft.yaml"


def _flags(*argv: str) -> rq.Request:
    args, extra = build_parser().parse_known_args(list(argv))
    assert not extra
    return rq.read_flags(args)


def test_flags_and_body_read_the_same_request():
    cli = _flags("estimate", LLAMA, "--method", "lora", "--batch-size", "2", "--seq-len", "1024", "--profile", "hf")
    api = rq.read_body({"config": CONFIG, "method": "lora", "batch_size": 2, "seq_len": 1024, "profile": "hf"})
    assert cli.profile == api.profile == "hf"
    for name in ("method", "batch_size", "seq_len"):
        assert cli.settings[name] == api.settings[name]
    # the same request gives the same estimate on both surfaces as from the Python API
    want = vramwise.estimate(LLAMA, profile="hf", method="lora", batch_size=2, seq_len=1024)
    assert cli.estimate().total == api.estimate().total == want.total
    assert cli.label == LLAMA and api.label == "the uploaded config"


def test_a_request_is_frozen():
    req = _flags("estimate", LLAMA)
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.profile = "hf"
    with pytest.raises(TypeError):
        req.settings["method"] = "full"
    # a change is a new request; the old one stays as it was
    assert req.with_settings(method="full").settings["method"] == "full" and req.settings["method"] != "full"


@pytest.mark.parametrize("names", [rq.CLI_NAMES, rq.API_NAMES])
def test_gpus_under_a_strategy_is_the_world_size(names):
    req = rq.read_body({"config": CONFIG, "profile": "hf", "method": "full", "strategy": "fsdp"})
    assert req.with_strategy_gpus([8], None, names).settings["world_size"] == 8
    with pytest.raises(SettingsError, match=f"{names['gpus']} is the number of GPUs it runs on"):
        req.with_strategy_gpus([2, 4], None, names)
    with pytest.raises(SettingsError, match=f"{names['gpus']} 8 and {names['world_size']} 4 disagree"):
        req.with_strategy_gpus([8], 4, names)
    # without a strategy the GPU counts are the counts the per-GPU minimum is shown for: nothing changes
    plain = rq.read_body({"config": CONFIG})
    assert plain.with_strategy_gpus([1, 3], None, names) is plain


def test_a_serving_estimate_refuses_a_gpu_count():
    est = rq.read_body({"config": CONFIG, "profile": "vllm", "method": "inference", "gpu": "H100"}).estimate()
    with pytest.raises(SettingsError, match="tensor_parallel_size x pipeline_parallel_size GPUs: give those instead of gpus"):
        rq.refuse_serving_gpus(est, rq.API_NAMES)
    with pytest.raises(SettingsError, match="--tensor-parallel-size x --pipeline-parallel-size GPUs"):
        rq.refuse_serving_gpus(est, rq.CLI_NAMES)
    rq.refuse_serving_gpus(vramwise.estimate(LLAMA), rq.API_NAMES)  # a training estimate: no refusal


@pytest.mark.parametrize("argv,needle", [
    (["estimate"], "give a MODEL (config.json, folder or hub id), or --params / --weight-bytes"),
    (["estimate", LLAMA, "--params", "8B"], "give either a MODEL or --params / --weight-bytes, not both"),
    (["estimate", LLAMA, "--set", "seq_len=8"], "--set and --framework apply to a recipe: give --recipe FILE"),
    (["estimate", "--recipe", str(RECIPE), "--params", "8B"], "give either --recipe or --params / --weight-bytes"),
    (["estimate", "--params", "8B", "--profile", "hf"], "profile hf needs the model's config: give MODEL"),
    (["estimate", LLAMA, "--hub"], "--hub reads a hub id, but"),
])
def test_flag_refusals(argv, needle):
    with pytest.raises(SettingsError) as e:
        _flags(*argv)
    assert needle in str(e.value)


@pytest.mark.parametrize("body,error,needle", [
    ({}, SettingsError, "give one of: model (a name in the model catalog), config"),
    ({"config": CONFIG, "model": "meta-llama/Llama-3.1-8B"}, SettingsError, "give one of: model"),
    ({"model": " "}, SettingsError, "model must be a name in the model catalog"),
    ({"config": [1]}, ConfigError, "config must be a JSON object"),
    ({"config_text": 3}, ConfigError, "config_text must be the text of a config.json file"),
    ({"config": CONFIG, "nosuch": 1}, SettingsError, "unknown field(s) 'nosuch'; fields: model or config"),
    ({"config": CONFIG, "framework": "axolotl"}, SettingsError, "framework names the format of a recipe"),
    ({"config": CONFIG, "recipe": []}, SettingsError, "recipe must be a list of 1 to 8 parts"),
    ({"config": CONFIG, "recipe": [{"text": 1}]}, SettingsError, "recipe part 1 must be an object {name, text}"),
    ({"config": CONFIG, "seq_len": [1, 2]}, SettingsError, "seq_len must be a single value"),
    ({"config": CONFIG, "lora_dropout": float("nan")}, SettingsError, "lora_dropout must be finite"),
    ({"config": CONFIG, "target_modules": 3}, SettingsError, "target_modules must be module names"),
    ({"config": CONFIG, "profile": 3}, SettingsError, "profile must be a name"),
    ({"recipe": [{"name": "r.yaml", "text": "output_dir: x\nper_device_train_batch_size: 2\n"}], "framework": "trl"},
     SettingsError, "the recipe names no model: choose one, or upload its config.json"),
])
def test_body_refusals(body, error, needle):
    with pytest.raises(error) as e:
        rq.read_body(body)
    assert needle in str(e.value)


def test_the_answers_own_fields_are_accepted_and_kept_out_of_the_settings():
    req = rq.read_body({"config": CONFIG, "gpu": "H100", "headroom": 0.1}, ("gpu", "headroom"))
    assert "gpu" not in req.settings and "headroom" not in req.settings


def test_a_recipe_is_read_under_the_flags_given():
    # the recipe says per_device_train_batch_size 2 and max_length 2048; --batch-size 4 wins over it
    req = _flags("estimate", "--recipe", str(RECIPE), "--batch-size", "4")
    assert req.recipe is not None and req.model == "Qwen/Qwen3-8B" and req.label == "Qwen/Qwen3-8B"
    assert req.settings["batch_size"] == 4 and req.settings["seq_len"] == 2048


def test_size_only_request():
    req = _flags("estimate", "--params", "8B")
    # 8B written with its unit: 8 * 10**9 parameters, shown as count() writes it (two decimals and B)
    assert req.size_only and req.profile == "size_only" and req.label == "a model of 8.00 B parameters (no config)"
