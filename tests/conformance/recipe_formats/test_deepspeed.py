"""The DeepSpeed format against DeepSpeed's own config classes, field by field.

zero_optimization is parsed by deepspeed.runtime.zero.config.get_zero_config (DeepSpeedZeroConfig, no
distributed backend needed); the precision by runtime/precision_config.py's readers.
"""

import json
from pathlib import Path

import pytest

import vramwise
from vramwise.recipes.reader import bundled_formats
from helpers import DEEPSPEED_MISSING, deepspeed_present

# each test imports deepspeed itself; without it each is skipped, saying so (a failure under VRAMWISE_REQUIRE_DEEPSPEED=1)
pytestmark = pytest.mark.skipif(not deepspeed_present(), reason=DEEPSPEED_MISSING)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes"
FILES = sorted(FIXTURES.glob("deepspeed/*.json")) + sorted(
    FIXTURES.glob("accelerate/deepspeed_config_templates/*.json"))
STRATEGY = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}


def device(offload) -> str:
    return str(getattr(offload.device, "value", offload.device))  # OffloadDeviceEnum or its text


def compare(recipe, data):
    from deepspeed.runtime.precision_config import get_bfloat16_config, get_float16_config
    from deepspeed.runtime.zero.config import get_zero_config

    z = get_zero_config(data)
    assert recipe.settings["strategy"] == STRATEGY[int(z.stage)]
    param = z.offload_param is not None and device(z.offload_param) != "none"
    optim = z.offload_optimizer is not None and device(z.offload_optimizer) != "none"
    assert recipe.settings["offload"] == ("parameters" if param else "optimizer" if optim else "none")
    micro = data.get("train_micro_batch_size_per_gpu")
    if isinstance(micro, int):
        assert recipe.settings["batch_size"] == micro
    fp16, bf16 = data.get("fp16", {}).get("enabled"), data.get("bf16", {}).get("enabled")
    if "auto" not in (fp16, bf16):
        expected = ("bf16" if get_bfloat16_config(data).enabled else "fp16" if get_float16_config(data).enabled
                    else "no")
        assert recipe.extras["mixed_precision"] == expected


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_fixture_against_deepspeed(path):
    r = vramwise.read_recipe(path, overrides={"world_size": 8})
    compare(r, json.loads(path.read_text()))


@pytest.mark.parametrize("data", [
    {"zero_optimization": True},
    {"zero_optimization": {"stage": 3, "cpu_offload_param": True}},
    {"zero_optimization": {"stage": 2, "cpu_offload": True}, "bf16": {"enabled": True}},
    {"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}},
    {"train_micro_batch_size_per_gpu": 3, "fp16": {"enabled": True}},
])
def test_written_configs_against_deepspeed(data):
    r = vramwise.read_recipe(data, framework="deepspeed", overrides={"world_size": 2})
    compare(r, data)


def test_every_zero_field_is_known():
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    known = bundled_formats().get("deepspeed").known_keys()
    fields = {"zero_optimization." + (f.alias or name) for name, f in DeepSpeedZeroConfig.model_fields.items()}
    missing = [f for f in fields if not any(f == k or f.startswith(k + ".") for k in known)]
    assert sorted(missing) == []
