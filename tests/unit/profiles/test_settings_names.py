"""Strategy and offload names come from formulas/strategies/strategies.yaml, read only when needed."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources

import yaml

from vramwise.profiles import settings


def _manifest() -> dict:
    text = resources.files("vramwise.formulas").joinpath("strategies", "strategies.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def test_strategies_are_the_manifest_s_with_none_first():
    assert tuple(settings.STRATEGIES) == ("none",) + tuple(_manifest()["strategies"])
    assert settings.STRATEGIES[0] == "none" and "fsdp" in settings.STRATEGIES


def test_offload_modes_are_every_offload_setting_of_the_manifest():
    listed = {mode for entry in _manifest()["strategies"].values() for mode in entry["offload"]}
    assert set(settings.OFFLOAD_MODES) == listed | {"none"} and settings.OFFLOAD_MODES[0] == "none"
    assert len(settings.OFFLOAD_MODES) == len(set(settings.OFFLOAD_MODES))


def test_the_setting_choices_are_those_names():
    by_name = {s.name: s for s in settings.SETTINGS}
    assert list(by_name["strategy"].choices) == list(settings.STRATEGIES)
    assert list(by_name["offload"].choices) == list(settings.OFFLOAD_MODES)


def test_an_estimate_without_a_strategy_reads_no_manifest():
    code = ("import vramwise, vramwise.profiles.settings as s; "
            "vramwise.estimate({'model_type': 'llama', 'vocab_size': 1000, 'hidden_size': 256, "
            "'intermediate_size': 512, 'num_hidden_layers': 2, 'num_attention_heads': 4}); "
            "print(s.strategy_manifest_names.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0"
