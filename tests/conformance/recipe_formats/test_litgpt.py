"""The LitGPT recipe format against LitGPT's own parser and classes, field by field.

Each fixture (tests/fixtures/recipes/litgpt/, config_hub/finetune recipes of litgpt v0.5.9) is parsed by
the jsonargparse parser `litgpt` itself builds (litgpt/__main__.py main(), captured before it runs), as
`litgpt finetune_lora --config FILE` or `litgpt finetune_full --config FILE` (the config_hub file name
says which); the train mapping becomes litgpt.args.TrainArgs, the optimizer is built by
litgpt.utils.instantiate_torch_optimizer, and checkpoint_dir's model is litgpt.Config.from_name's. What
vramwise read from the same file must agree with each.
"""

import importlib.util
import warnings
from pathlib import Path

import pytest

if importlib.util.find_spec("litgpt") is None:  # imported by the tests that use it: lightning takes seconds to import
    pytest.skip("could not import 'litgpt': it is not installed", allow_module_level=True)
jsonargparse = pytest.importorskip("jsonargparse")

import vramwise  # noqa: E402
from vramwise.inputs.catalog import find_model  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "litgpt"
NAMES = sorted(p.name for p in FIXTURES.glob("*.yaml"))
# lora_<switch> (finetune/lora.py:58-63) -> the modules it adapts: LitGPT's own module names in litgpt.lora's
# GPT (attn.qkv's query/key/value parts, attn.proj, mlp.fc_1/fc_2/proj, lm_head) in transformers' names
SWITCHES = {"query": ("q_proj",), "key": ("k_proj",), "value": ("v_proj",), "projection": ("o_proj",),
            "mlp": ("gate_proj", "up_proj", "down_proj"), "head": ("lm_head",)}


@pytest.fixture(scope="module")
def parser():
    from litgpt.__main__ import main

    with warnings.catch_warnings():  # litgpt 0.5.9's main() calls functions jsonargparse 4.39+ deprecates
        warnings.simplefilter("ignore", DeprecationWarning)
        return jsonargparse.capture_parser(main)


def command(name: str) -> str:
    # config_hub/finetune/<model>/{lora,qlora}.yaml run with finetune_lora, full.yaml with finetune_full
    return "finetune_full" if name.endswith("-full.yaml") else "finetune_lora"


def parsed(parser, name):
    sub = command(name)
    return sub, parser.parse_args([sub, "--config", str(FIXTURES / name)])[sub]


def test_every_fixture_is_a_config_hub_recipe():
    assert len(NAMES) >= 6
    for name in NAMES:
        first = (FIXTURES / name).read_text().splitlines()[0]
        assert first.startswith("# source: Lightning-AI/litgpt v0.5.9"), name


@pytest.mark.parametrize("name", NAMES)
def test_settings_agree_with_litgpts_parser(parser, name):
    from litgpt.args import TrainArgs
    from litgpt.utils import parse_devices

    sub, ns = parsed(parser, name)
    r = vramwise.read_recipe(FIXTURES / name)
    s = r.settings
    train = TrainArgs(**ns.train.as_dict())

    if sub == "finetune_full":
        assert s["method"] == "full"
    else:
        four_bit = ns.quantize is not None and ns.quantize.startswith(("bnb.nf4", "bnb.fp4"))
        assert s["method"] == ("qlora" if four_bit else "lora")
        assert s["lora_rank"] == ns.lora_r
        assert s["lora_dropout"] == ns.lora_dropout
        assert set(s["target_modules"]) == {m for n, ms in SWITCHES.items() if ns[f"lora_{n}"] for m in ms}
    assert s["batch_size"] == train.micro_batch_size
    assert s["seq_len"] == train.max_seq_length

    devices = parse_devices(ns.devices)
    ranks = devices * ns.num_nodes
    assert s["world_size"] == ranks
    # finetune/lora.py:149-163, full.py:106-115: FSDP (with Block checkpointing) when devices * num_nodes > 1
    assert s["strategy"] == ("fsdp" if ranks > 1 else "none")
    assert s["gradient_checkpointing"] == ("true" if ranks > 1 else "none")

    assert r.extras["global_batch_size"] == train.global_batch_size
    assert r.extras["num_nodes"] == ns.num_nodes
    # LitGPT's own figure, per device on every rank count
    assert r.extras["gradient_accumulation_steps"] == train.gradient_accumulation_iters(devices, ns.num_nodes)


@pytest.mark.parametrize("name", NAMES)
def test_optimizer_is_the_one_litgpt_builds(parser, name):
    import torch
    from litgpt.utils import instantiate_bnb_optimizer, instantiate_torch_optimizer

    _, ns = parsed(parser, name)
    params = [torch.nn.Parameter(torch.zeros(4))]
    got = vramwise.read_recipe(FIXTURES / name).settings["optimizer"]
    quantize = ns.get("quantize")  # finetune_full has no quantize
    if quantize is not None and quantize.startswith("bnb."):
        # BitsandbytesPrecision (finetune/lora.py:138-146) makes main() call instantiate_bnb_optimizer (lora.py:213-215)
        bnb = pytest.importorskip("bitsandbytes")
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # paged states fall back to plain ones on the CPU
            opt = instantiate_bnb_optimizer(ns.optimizer, params)
        # bitsandbytes' 32-bit paged AdamW: vramwise's paged_adamw_32bit
        assert type(opt) is bnb.optim.PagedAdamW and opt.is_paged and opt.args.optim_bits == 32
        assert got == "paged_adamw_32bit"
        return
    opt = instantiate_torch_optimizer(ns.optimizer, params)
    # torch's AdamW without fused=True is transformers' adamw_torch (the name the profiles' tables use)
    assert type(opt) is torch.optim.AdamW and not opt.defaults.get("fused")
    assert got == "adamw_torch"


@pytest.mark.parametrize("name", NAMES)
def test_model_is_litgpts_model_of_checkpoint_dir(parser, name):
    from litgpt import Config

    _, ns = parsed(parser, name)
    org, repo = Path(ns.checkpoint_dir).parts[-2:]
    lit = Config.from_name(f"{org}/{repo}")  # the hub repository LitGPT's config names (hf_config)
    model = find_model(vramwise.read_recipe(FIXTURES / name).model)
    assert model is not None
    cfg = model.config
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["intermediate_size"], cfg["vocab_size"]) == (
        lit.n_layer, lit.n_embd, lit.n_head, lit.n_query_groups, lit.intermediate_size, lit.padded_vocab_size)


def test_defaults_left_out_agree_with_setups_defaults(parser, tmp_path):
    """A recipe that writes only checkpoint_dir, lora_r and precision: every other value is setup()'s."""
    from litgpt.args import TrainArgs

    recipe = tmp_path / "lora.yaml"
    recipe.write_text("checkpoint_dir: checkpoints/meta-llama/Meta-Llama-3.1-8B\nlora_r: 16\nprecision: bf16-true\n")
    ns = parser.parse_args(["finetune_lora", "--config", str(recipe)])["finetune_lora"]
    train = TrainArgs(**ns.train.as_dict())
    r = vramwise.read_recipe(recipe)
    s = r.settings
    assert s["batch_size"] == train.micro_batch_size
    assert s["lora_dropout"] == ns.lora_dropout
    assert set(s["target_modules"]) == {m for n, ms in SWITCHES.items() if ns[f"lora_{n}"] for m in ms}
    assert s["world_size"] == ns.devices * ns.num_nodes
    assert r.extras["global_batch_size"] == train.global_batch_size
    assert r.extras["gradient_accumulation_steps"] == train.gradient_accumulation_iters(ns.devices, ns.num_nodes)
    assert ns.optimizer == "AdamW" and s["optimizer"] == "adamw_torch"
    # TrainArgs' own class defaults differ (args.py:16-18): the parser fills train from setup's instance
    assert (TrainArgs().micro_batch_size, TrainArgs().global_batch_size) == (4, 64)
    assert (train.micro_batch_size, train.global_batch_size) == (1, 16)
