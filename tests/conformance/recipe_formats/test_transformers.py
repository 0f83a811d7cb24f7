"""The transformers / TRL recipe format against transformers' and TRL's own parsers, field by field.

TRL's command-line YAMLs are parsed by HfArgumentParser((ScriptArguments, SFTConfig, ModelConfig)) as
`trl sft --config FILE` does (trl/scripts/utils.py TrlParser; the keys TRL hands to accelerate launch,
num_processes and accelerate_config, set aside first). Saved configs are rebuilt with
TrainingArguments(**json) / SFTConfig(**json), and configs are also written by the installed
transformers and read back. What vramwise read must agree with the dataclasses' values.
"""

import dataclasses
import json
import warnings
from pathlib import Path

import pytest
import yaml

transformers = pytest.importorskip("transformers")
trl = pytest.importorskip("trl")

import vramwise  # noqa: E402
from vramwise.recipes.reader import bundled_formats  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "transformers"
YAMLS = sorted(p.name for p in FIXTURES.glob("*.yaml"))
LAUNCH_KEYS = ("num_processes", "accelerate_config")  # trl/cli.py:53-83, accelerate launch's
#: the format's release of the installed TRL: the dataclasses compared are that release's
INSTALLED = f"transformers@{trl.__version__}"


def trl_parse(data: dict):
    from transformers import HfArgumentParser
    from trl import ModelConfig, ScriptArguments, SFTConfig

    data = {k: v for k, v in data.items() if k not in LAUNCH_KEYS}
    data.setdefault("bf16", False)  # SFTConfig's bf16 default needs a GPU to validate; not compared
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HfArgumentParser((ScriptArguments, SFTConfig, ModelConfig)).parse_dict(data)


def compare(recipe, args, model_args=None):
    s = recipe.settings
    assert s["batch_size"] == args.per_device_train_batch_size
    assert recipe.extras["gradient_accumulation_steps"] == args.gradient_accumulation_steps
    assert s["optimizer"] == str(getattr(args.optim, "value", args.optim))
    assert s["gradient_checkpointing"] == ("true" if args.activation_checkpointing else "none")
    assert s["compile"] is bool(args.torch_compile)
    assert s["loss"] == ("fused" if args.use_liger_kernel else "standard")
    if hasattr(args, "max_length") and args.max_length is not None:
        assert s["seq_len"] == args.max_length
    if hasattr(args, "activation_offloading"):
        assert s["activation_offloading"] is bool(args.activation_offloading)
    if model_args is not None:
        assert recipe.model == model_args.model_name_or_path
        if model_args.use_peft:
            assert s["method"] == ("qlora" if model_args.load_in_4bit else "lora")
            assert s["lora_rank"] == model_args.lora_r
            assert s["lora_dropout"] == model_args.lora_dropout
            targets = model_args.lora_target_modules
            if targets is not None:
                assert tuple(s["target_modules"]) == ((targets,) if isinstance(targets, str) else tuple(targets))
        else:
            assert s["method"] == "full"
        if model_args.attn_implementation in ("sdpa", "eager", "flash_attention_2", "flash_attention_3"):
            assert s["attention"] == model_args.attn_implementation


@pytest.mark.parametrize("name", YAMLS)
def test_trl_yaml_against_hf_argument_parser(name):
    data = yaml.safe_load((FIXTURES / name).read_text())
    script_args, args, model_args = trl_parse(data)
    r = vramwise.read_recipe(FIXTURES / name, framework=INSTALLED)
    compare(r, args, model_args)


@pytest.mark.parametrize("name", ["sftconfig_saved.json", "trainingarguments_fsdp_saved.json"])
def test_saved_json_against_the_dataclass(name):
    from transformers import TrainingArguments
    from trl import SFTConfig

    data = json.loads((FIXTURES / name).read_text())
    cls = SFTConfig if "max_length" in data else TrainingArguments
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = cls(**{k: v for k, v in data.items() if not k.endswith("_token")})
    r = vramwise.read_recipe(FIXTURES / name, framework=INSTALLED)
    compare(r, args)
    if args.fsdp:
        plugin = args.fsdp_plugin_args
        assert r.settings["strategy"] == ("fsdp" if plugin["reshard_after_forward"] else "fsdp_shard_grad_op")
        assert r.settings["offload"] == ("parameters" if plugin.get("cpu_offload") else "none")


CASES = [
    dict(per_device_train_batch_size=3, gradient_accumulation_steps=5, optim="adamw_8bit"),
    dict(per_device_train_batch_size=1, optim="paged_adamw_32bit", activation_checkpointing=True, torch_compile=True),
    dict(gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False}, optim="sgd"),
    dict(fsdp="full_shard auto_wrap", fsdp_config={"min_num_params": 1000}),
    dict(fsdp="shard_grad_op offload"),
    dict(fsdp=True, fsdp_config={"reshard_after_forward": False}),
]


@pytest.mark.parametrize("kwargs", CASES)
def test_training_arguments_written_by_transformers(kwargs, tmp_path):
    from transformers import TrainingArguments

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = TrainingArguments(output_dir=str(tmp_path), report_to="none", **kwargs)
    path = tmp_path / "args.json"
    path.write_text(args.to_json_string())
    r = vramwise.read_recipe(path)
    assert r.format == "transformers"
    compare(r, args)
    if args.fsdp:
        plugin = args.fsdp_plugin_args
        assert r.settings["strategy"] == ("fsdp" if plugin["reshard_after_forward"] else "fsdp_shard_grad_op")
        assert r.settings["offload"] == ("parameters" if plugin.get("cpu_offload") else "none")
    else:
        assert r.settings["strategy"] == "none"
    assert not any("unknown" in w for w in r.warnings), r.warnings


def test_sft_config_defaults_are_trl_s(tmp_path):
    """A TRL YAML that sets nothing gets SFTConfig's and ModelConfig's own defaults."""
    _, args, model_args = trl_parse({"model_name_or_path": "Qwen/Qwen2.5-0.5B"})
    p = tmp_path / "sft.yaml"
    p.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\n")
    r = vramwise.read_recipe(p, framework=INSTALLED)
    compare(r, args, model_args)
    assert r.settings["seq_len"] == args.max_length == 1024
    _, args, model_args = trl_parse({"model_name_or_path": "m", "use_peft": True})
    p.write_text("model_name_or_path: m\nuse_peft: true\n")
    compare(vramwise.read_recipe(p, framework=INSTALLED), args, model_args)


def test_every_field_is_mapped_unmodelled_or_ignored():
    from transformers import TrainingArguments
    from trl import ModelConfig, ScriptArguments, SFTConfig

    known = bundled_formats().get("transformers").known_keys()
    fields = {f.name for cls in (TrainingArguments, SFTConfig, ModelConfig, ScriptArguments)
              for f in dataclasses.fields(cls) if f.init}
    assert sorted(fields - known) == []
