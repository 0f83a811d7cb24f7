"""The strategies ``measure`` runs are formulas/stacks.yaml's (each stack's ``strategies``), names of the
strategies manifest, and each has a wrapper in the distributed runner."""

from __future__ import annotations

from importlib import resources

import yaml

from vramwise.measuring.strategies import STRATEGIES


def _data(*parts: str) -> dict:
    return yaml.safe_load(resources.files("vramwise.formulas").joinpath(*parts).read_text(encoding="utf-8"))


def test_measure_runs_the_strategies_the_stacks_list_once_each_in_their_order():
    # formulas/stacks.yaml: hf runs [ddp, fsdp, fsdp_shard_grad_op, zero1, zero2, zero3]; torchtune's two
    # are among them; litgpt runs none
    expected, seen = [], set()
    for entry in _data("stacks.yaml")["stacks"].values():
        for s in entry["strategies"]:
            if s not in seen:
                seen.add(s)
                expected.append(s)
    assert tuple(STRATEGIES) == tuple(expected) == ("ddp", "fsdp", "fsdp_shard_grad_op", "zero1", "zero2", "zero3")
    assert set(STRATEGIES) <= set(_data("strategies", "strategies.yaml")["strategies"])


def test_each_measured_strategy_has_a_wrapper_in_the_runner():
    from vramwise.measuring.distributed import _WRAPPINGS
    from vramwise.measuring.zero import ZERO_STAGES

    assert set(STRATEGIES) == set(_WRAPPINGS) | set(ZERO_STAGES)
