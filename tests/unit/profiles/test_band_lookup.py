"""The error band each estimate carries, for every strategy of every profile that runs it, against
accuracy/bands.yaml read here with a plain YAML reader: the band of (profile, method, strategy) when the
file has one, with its figures, and no measured band (with a reason) when it has none."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import vramwise

ROOT = Path(__file__).resolve().parents[3]
SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
FILE = yaml.safe_load((ROOT / "accuracy" / "bands.yaml").read_text())
#: (profile, method, strategy) -> the file's entry, for uncompiled steps
BANDS = {(b["profile"], b["method"], b["strategy"]): b for b in FILE["bands"] if not b.get("compile", False)}
UNMEASURED_PROFILES = {u["profile"] for u in FILE["unmeasured"] if "profile" in u}

#: every strategy with the training profiles that run it (formulas/strategies/strategies.yaml), and one GPU
STRATEGIES = {"none": ("hf", "torchtune", "litgpt"), "ddp": ("hf",), "fsdp": ("hf", "torchtune", "litgpt"),
              "fsdp_shard_grad_op": ("hf", "torchtune"), "fsdp_hybrid": ("hf",), "zero1": ("hf",), "zero2": ("hf",),
              "zero3": ("hf",), "device_map": ("hf",)}
CASES = [(p, m, s) for s, profiles in STRATEGIES.items() for p in profiles for m in ("full", "lora", "qlora")]


def test_the_cases_are_every_strategy_of_the_registry():
    registry = vramwise.Registry.default()
    assert set(STRATEGIES) - {"none"} == set(registry.strategy_names())
    for name in registry.strategy_names():
        measured_profiles = set(registry.strategy_info(name)["profiles"]) - UNMEASURED_PROFILES
        assert measured_profiles == set(STRATEGIES[name]), name


@pytest.mark.parametrize("profile, method, strategy", CASES)
def test_the_estimate_carries_its_strategys_band(profile, method, strategy):
    kw = {} if strategy == "none" else {"strategy": strategy, "world_size": 2}
    if strategy == "fsdp_hybrid":
        kw["world_size"] = 4
    settings = {"method": "lora", "load_in_4bit": True} if method == "qlora" else {"method": method}
    e = vramwise.estimate(SMALL, profile=profile, **settings, **kw)
    band = e.error_band.tensors
    assert (band.profile, band.method, band.strategy) == (profile, method, strategy)
    entry = BANDS.get((profile, method, strategy))
    if entry is None:
        assert not band.measured and band.reason
        assert band.median_abs_error is None
    else:
        assert band.measured and band.reason is None
        assert (band.cells, band.median_abs_error, band.max_abs_error) == (
            entry["cells"], entry["median_abs_error"], entry["max_abs_error"])
        assert band.world_sizes == tuple(entry["world_sizes"])


def test_the_file_has_bands_for_several_strategies():
    # the lookup is exercised on measured bands of each sharding family, not only on missing ones
    measured = {s for (_, _, s) in BANDS}
    assert {"none", "ddp", "fsdp", "fsdp_shard_grad_op", "zero1", "zero2", "zero3"} <= measured
