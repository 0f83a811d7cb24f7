"""The accelerate format against accelerate's own config classes, field by field.

Each fixture is loaded by accelerate.commands.config.config_args.ClusterConfig.from_yaml_file (what
`accelerate launch --config_file` reads); FSDP sharding and offload go through
FullyShardedDataParallelPlugin and DeepSpeed ZeRO settings through DeepSpeedPlugin, built from the
config's values as accelerate launch passes them.
"""

import dataclasses
from pathlib import Path

import pytest

from helpers import require_installed

require_installed("accelerate")  # imported by the tests (it imports torch)

import vramwise  # noqa: E402
from vramwise.recipes.reader import bundled_formats  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "accelerate"
FILES = sorted(FIXTURES.glob("**/*.yaml"))
SHARDING = {"FULL_SHARD": "fsdp", "SHARD_GRAD_OP": "fsdp_shard_grad_op", "NO_SHARD": "ddp",
            "HYBRID_SHARD": "fsdp_hybrid"}
ZERO = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}


def fsdp_strategy(cfg: dict) -> tuple[str, bool]:
    from accelerate.utils import FullyShardedDataParallelPlugin

    fc = {k[5:] if k.startswith("fsdp_") else k: v for k, v in cfg.items()}
    version = int(fc.get("version", 1))
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=version, sharding_strategy=fc.get("sharding_strategy"),
        reshard_after_forward=fc.get("reshard_after_forward"), cpu_offload=bool(fc.get("offload_params", False)))
    if version == 2:
        strategy = "fsdp" if plugin.reshard_after_forward else "fsdp_shard_grad_op"
        offload = type(plugin.cpu_offload).__name__ == "CPUOffloadPolicy"
    else:
        chosen = plugin.sharding_strategy if plugin.sharding_strategy is not None else plugin.reshard_after_forward
        strategy = SHARDING[chosen.name]
        offload = bool(plugin.cpu_offload.offload_params)
    return strategy, offload


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_against_cluster_config(path):
    from accelerate.commands.config.config_args import ClusterConfig

    cfg = ClusterConfig.from_yaml_file(str(path))
    r = vramwise.read_recipe(path)
    kind = cfg.distributed_type.value
    s = r.settings
    if kind == "NO":
        assert s["strategy"] == "none" and s["world_size"] == 1
    elif cfg.num_processes == -1:
        # accelerate's ClusterConfig default (config_args.py: num_processes -1, "if we use SLURM and the user manually
        # passes it in"): the count is the launch line's, so vramwise keeps one GPU and says how to give it
        assert s["world_size"] == 1
        assert any("the recipe does not say how many; set world_size" in w for w in r.warnings), r.warnings
    else:
        assert s["world_size"] == cfg.num_processes
        assert s["gpus_per_node"] == cfg.num_processes // cfg.num_machines
    assert r.extras["num_machines"] == cfg.num_machines
    if cfg.mixed_precision:
        assert r.extras.get("mixed_precision") == cfg.mixed_precision
    if kind == "MULTI_GPU":
        assert s["strategy"] == "ddp"
    elif kind == "FSDP":
        strategy, offload = fsdp_strategy(cfg.fsdp_config)
        assert s["strategy"] == strategy
        assert s["offload"] == ("parameters" if offload else "none")
    elif kind == "DEEPSPEED":
        from accelerate.utils import DeepSpeedPlugin

        ds = cfg.deepspeed_config
        if ds.get("deepspeed_config_file"):
            plugin = DeepSpeedPlugin(hf_ds_config=str((path.parent / ds["deepspeed_config_file"]).resolve()))
            stage = plugin.deepspeed_config["zero_optimization"]["stage"]
        else:
            plugin = DeepSpeedPlugin(zero_stage=ds.get("zero_stage"),
                                     offload_optimizer_device=ds.get("offload_optimizer_device"),
                                     offload_param_device=ds.get("offload_param_device"))
            stage = plugin.zero_stage
            param = plugin.offload_param_device not in (None, "none")
            optim = plugin.offload_optimizer_device not in (None, "none")
            assert s["offload"] == ("parameters" if param else "optimizer" if optim else "none")
        assert s["strategy"] == ZERO[int(stage)]


def test_every_cluster_config_field_is_known():
    from accelerate.commands.config.config_args import ClusterConfig

    known = bundled_formats().get("accelerate").known_keys()
    fields = {f.name for f in dataclasses.fields(ClusterConfig)}
    # a mapping field (fsdp_config, deepspeed_config) is covered by the keys read under it
    missing = [f for f in fields if f not in known and not any(k.startswith(f + ".") for k in known)]
    assert sorted(missing) == []
