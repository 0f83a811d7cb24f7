"""The ZeRO measurement's pieces that need no process group: what it refuses, the DeepSpeed configuration it
runs (read back by DeepSpeed's own config classes), and how its tracker keeps host storages out of the count."""

from __future__ import annotations

import pytest

from vramwise.errors import SettingsError
from helpers import require_deepspeed


def test_offload_is_refused_where_deepspeed_has_none():
    from vramwise.measuring.distributed import check_offload

    assert check_offload("none", "ddp") == "none"
    assert check_offload("optimizer", "zero1") == "optimizer"
    assert check_offload("parameters", "zero3") == "parameters"
    with pytest.raises(SettingsError, match="ZeRO-3 alone"):
        check_offload("parameters", "zero2")  # offload_param is stage 3's only
    with pytest.raises(SettingsError, match="not under strategy fsdp"):
        check_offload("optimizer", "fsdp")


def test_the_config_is_deepspeeds_defaults_with_bf16_and_the_stage():
    require_deepspeed()
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    from vramwise.measuring.zero import ds_config

    cfg = ds_config("zero3", "parameters", 2)
    zero = DeepSpeedZeroConfig(**cfg["zero_optimization"])
    assert zero.stage == 3 and cfg["bf16"] == {"enabled": True}
    assert zero.offload_param.device == "cpu" and zero.offload_optimizer.device == "cpu"
    z2 = DeepSpeedZeroConfig(**ds_config("zero2", "none", 2)["zero_optimization"])
    assert z2.stage == 2 and z2.offload_optimizer is None and z2.contiguous_gradients
    # the buckets zero.yaml sizes are DeepSpeed's defaults, the ones measure runs
    import os

    import yaml

    from vramwise.formulas import strategies as folder

    with open(os.path.join(folder.__path__[0], "zero.yaml")) as f:
        constants = yaml.safe_load(f)["constants"]
    assert constants["reduce_bucket_size"]["value"] == z2.reduce_bucket_size == 500_000_000
    assert constants["allgather_bucket_size"]["value"] == z2.allgather_bucket_size
    assert constants["stage3_prefetch_bucket_size"]["value"] == zero.prefetch_bucket_size


def test_host_storages_and_what_is_made_from_them_are_not_counted():
    torch = pytest.importorskip("torch")
    from vramwise.measuring.zero import HostAwareTracker

    tracker = HostAwareTracker()
    with tracker.mode():
        device = torch.zeros(256)  # 1024 bytes: two 512-byte blocks
        host = torch.zeros(1024)  # 4096 bytes
    assert tracker.current == 1024 + 4096
    tracker.to_host(host)
    assert tracker.current == 1024 and tracker.host_current == 4096
    with tracker.mode():
        made = host * 2  # computed from a host tensor: host memory too
        device.copy_(host[:256])  # written in place: stays where it is
        fresh = device + 1  # from device tensors only: counted
    assert tracker.current == 1024 + 1024 and tracker.host_current == 2 * 4096
    del made, fresh
    tracker.sweep()
    assert tracker.current == 1024 and tracker.host_current == 4096


TINY = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}


def _handed_over(monkeypatch):
    """measure's settings as it hands them to the distributed run (which is not started here)."""
    from vramwise.measuring import distributed

    seen = []
    monkeypatch.setattr(distributed, "measure_distributed",
                        lambda cfg, settings, steps, strategy, world_size, stack: seen.append(settings) or "ran")
    return seen


def test_measure_hands_an_offload_to_zero_and_refuses_it_without_a_strategy(monkeypatch):
    from vramwise.measuring.steps import measure

    require_deepspeed()
    seen = _handed_over(monkeypatch)
    for strategy, offload in (("zero2", "optimizer"), ("zero3", "parameters")):
        assert measure(TINY, method="full", optimizer="adamw_torch", strategy=strategy, offload=offload) == "ran"
        assert (seen[-1].strategy, seen[-1].offload, seen[-1].fsdp_head_units) == (strategy, offload, False)
    with pytest.raises(SettingsError, match="needs a strategy that offloads"):
        measure(TINY, method="full", optimizer="adamw_torch", offload="optimizer")


def test_measure_shards_head_units_for_torchtunes_fsdp_only(monkeypatch):
    from vramwise.measuring.steps import measure

    seen = _handed_over(monkeypatch)
    with pytest.raises(SettingsError, match="--stack torchtune under --strategy fsdp only"):
        measure(TINY, method="full", optimizer="adamw_torch", strategy="fsdp", fsdp_head_units=True)  # stack hf
    with pytest.raises(SettingsError, match="true or false"):
        measure(TINY, method="full", optimizer="adamw_torch", strategy="fsdp", fsdp_head_units="yes")
    assert not seen
