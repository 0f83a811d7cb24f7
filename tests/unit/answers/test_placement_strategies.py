"""Per GPU means a strategy: ``per_gpu_by_strategy`` and the estimate command's per-GPU lines.

Every strategy figure is checked against an independent path through the public API, the same
settings estimated again with ``vramwise.estimate(..., strategy=s, world_size=n)``; the best is the
least, a tie going to the strategy listed first in formulas/strategies/strategies.yaml. The split rule
kept for a profile without its own strategies is checked against its documented formula
(docs/unsloth-profile.md#multi-gpu), worked from the estimate's components."""

from __future__ import annotations

import json

import pytest

import vramwise
import vramwise.estimation.estimate as estimate_module
from vramwise.answers.placement import PerGpuByStrategy, StrategyPerGpu, per_gpu_by_strategy
from vramwise.estimation.registry import Registry
from vramwise.surfaces.cli.main import main

SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
FULL = {"profile": "hf", "method": "full", "optimizer": "adamw_torch", "gradient_checkpointing": True}
COUNTS = (1, 2, 4)
# the manifest's strategies for hf, in its order (formulas/strategies/strategies.yaml)
HF_STRATEGIES = ("ddp", "fsdp", "fsdp_shard_grad_op", "fsdp_hybrid", "zero1", "zero2", "zero3", "device_map")


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f}"


def _direct(settings: dict, strategy: str, n: int):
    """The same run with the strategy on n GPUs, straight through vramwise.estimate: (bytes, None) or (None, why)."""
    try:
        return vramwise.estimate(SMALL, **settings, strategy=strategy, world_size=n).total, None
    except vramwise.SettingsError as e:
        return None, str(e)


@pytest.fixture()
def cfg(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(SMALL))
    return str(p)


def test_each_strategy_is_its_own_estimate_and_the_best_is_the_least():
    e = vramwise.estimate(SMALL, **FULL)
    got = per_gpu_by_strategy(e, COUNTS)
    assert isinstance(got, PerGpuByStrategy) and got.strategies == HF_STRATEGIES and got.counts == COUNTS
    assert len(got.cells) == len(HF_STRATEGIES) * len(COUNTS)
    for s in HF_STRATEGIES:
        for n in COUNTS:
            per_gpu, why = _direct(FULL, s, n)
            assert got.cell(s, n) == StrategyPerGpu(s, n, per_gpu, why)
    for n in COUNTS:
        ran = {s: got.cell(s, n).per_gpu for s in HF_STRATEGIES if got.cell(s, n).per_gpu is not None}
        least = min(ran.values())
        assert got.best_of(n).per_gpu == least
        # the tie rule: the first of the manifest's order among those with the least
        assert got.best_of(n).strategy == next(s for s in HF_STRATEGIES if ran.get(s) == least)
    # hybrid shard is full shard within a machine: on at most gpus_per_node (8) GPUs the two tie,
    # and the tie goes to fsdp, listed first
    assert all(got.cell("fsdp", n).per_gpu == got.cell("fsdp_hybrid", n).per_gpu for n in COUNTS)
    assert all(name != "fsdp_hybrid" for _, name in got.best)
    # hf's own min_per_gpu is an ideal split, not a strategy's figure: not kept
    assert got.split_rule == () and got.split_rule_text == ""


def test_the_estimates_made_are_bounded_by_strategies_times_counts(monkeypatch):
    e = vramwise.estimate(SMALL, **FULL)
    calls = []
    real = estimate_module.estimate

    def counting(*a, **k):
        calls.append(k.get("strategy"))
        return real(*a, **k)

    monkeypatch.setattr(estimate_module, "estimate", counting)
    per_gpu_by_strategy(e, [2, 2, 8])  # a repeated count is estimated once
    assert len(calls) == len(HF_STRATEGIES) * 2 and set(calls) == set(HF_STRATEGIES)


def test_a_refused_strategy_is_kept_with_why_and_never_best():
    e = vramwise.estimate(SMALL, **FULL)
    got = per_gpu_by_strategy(e, [1])
    cell = got.cell("device_map", 1)  # device_map places layers over at least 2 GPUs (min_world_size: 2)
    assert cell.per_gpu is None and "at least 2 GPUs" in cell.refused
    assert got.best_of(1).strategy != "device_map"
    # LitGPT's finetune scripts refuse --quantize on several devices: QLoRA under its FSDP is refused everywhere
    q = vramwise.estimate(SMALL, profile="litgpt", method="qlora")
    got = per_gpu_by_strategy(q, [1, 2])
    assert got.strategies == ("fsdp",) and got.best == ((1, None), (2, None)) and got.best_of(2) is None
    with pytest.raises(vramwise.SettingsError) as e2:
        vramwise.estimate(SMALL, profile="litgpt", method="qlora", strategy="fsdp", world_size=2)
    assert got.cell("fsdp", 2).refused == str(e2.value)
    assert got.to_dict()["counts"]["2"] == {"best": None, "per_gpu": {}, "refused": {"fsdp": str(e2.value)}}


def test_a_profile_without_its_own_strategies_keeps_its_split_rule():
    # unsloth models DDP only as the manifest's variant for it (its one-GPU total plus buckets): its split
    # rule stays, docs/unsloth-profile.md#multi-gpu:
    #   min_per_gpu = (weights + LoRA + optimizer + gradients) / N + activations + overhead
    e = vramwise.estimate(SMALL, profile="unsloth", method="lora")
    got = per_gpu_by_strategy(e, COUNTS)
    assert got.strategies == ("ddp",)
    assert got.cell("ddp", 2).per_gpu == _direct({"profile": "unsloth", "method": "lora"}, "ddp", 2)[0]
    states = e.weights + e.lora + e.optimizer + e.gradients
    for n, b in got.split_rule:
        assert b == pytest.approx(states / n + e.activations + e.overhead, abs=1)
    assert [n for n, _ in got.split_rule] == list(COUNTS) and "split over the GPUs" in got.split_rule_text
    # no strategy at all (the size-only fallback): the split rule alone
    s = vramwise.estimate_from_size(params=1e9, method="lora")
    got = per_gpu_by_strategy(s, [1, 2])
    assert got.strategies == () and got.cells == () and got.best == ((1, None), (2, None))
    assert dict(got.split_rule) == {1: s.min_per_gpu(1), 2: s.min_per_gpu(2)}


def test_the_estimate_command_prints_a_row_per_strategy_and_names_the_best(cfg, capsys):
    assert main(["estimate", cfg, "--profile", "hf", "--method", "full", "--optimizer", "adamw_torch",
                 "--gradient-checkpointing", "true", "--gpus", "1,2,4"]) == 0
    out = capsys.readouterr().out
    assert "minimum per GPU" not in out and "split rule" not in out
    lines = out.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.split() and line.split()[0] in HF_STRATEGIES}
    assert list(rows) == list(HF_STRATEGIES)
    best = {}
    for s in HF_STRATEGIES:
        for n, cell in zip(COUNTS, rows[s]):
            per_gpu, _ = _direct(FULL, s, n)
            assert cell.rstrip("*") == ("refused" if per_gpu is None else _gib(per_gpu))
            if cell.endswith("*"):
                best[n] = s
    direct = {n: min((s for s in HF_STRATEGIES if _direct(FULL, s, n)[0] is not None),
                     key=lambda s: _direct(FULL, s, n)[0]) for n in COUNTS}
    assert best == direct
    assert "refused: device_map on 1 GPU: strategy device_map runs on at least 2 GPUs" in out
    assert next(x for x in lines if x.startswith("best (least per GPU): ")).startswith(
        f"best (least per GPU): {direct[1]} on 1 GPU")


def test_the_estimate_command_names_the_split_rule_and_refusals(cfg, capsys):
    assert main(["estimate", cfg, "--profile", "unsloth", "--method", "lora", "--gpus", "1,2"]) == 0
    out = capsys.readouterr().out
    e = vramwise.estimate(SMALL, profile="unsloth", method="lora")
    assert (f"per GPU by the profile's split rule (no strategy): 1 x {_gib(e.min_per_gpu(1))} GiB, "
            f"2 x {_gib(e.min_per_gpu(2))} GiB; the rule: model state") in " ".join(out.split())
    assert main(["estimate", cfg, "--profile", "litgpt", "--method", "qlora", "--gpus", "2,4"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "fsdp refused refused" in out and "refused: fsdp on 2 and 4 GPUs: profile litgpt under strategy fsdp" in out
    assert "best (least per GPU): none, every strategy refuses these settings" in out


def test_estimate_json_adds_per_gpu_by_strategy_and_keeps_min_per_gpu(cfg, capsys):
    assert main(["estimate", cfg, "--profile", "hf", "--method", "full", "--optimizer", "adamw_torch",
                 "--gradient-checkpointing", "true", "--gpus", "1,2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    e = vramwise.estimate(SMALL, **FULL)
    assert data["min_per_gpu"] == {"1": e.min_per_gpu(1), "2": e.min_per_gpu(2)}  # as before
    p = data["per_gpu_by_strategy"]
    assert p["strategies"] == list(HF_STRATEGIES) and p["split_rule"] is None
    assert p["counts"]["2"]["per_gpu"] == {s: _direct(FULL, s, 2)[0] for s in HF_STRATEGIES}
    assert p["counts"]["1"]["refused"] == {"device_map": _direct(FULL, "device_map", 1)[1]}
    for n in ("1", "2"):
        c = p["counts"][n]
        assert c["per_gpu"][c["best"]] == min(c["per_gpu"].values())


def test_inference_has_no_strategies():
    e = vramwise.estimate(SMALL, profile="unsloth", method="inference")
    got = per_gpu_by_strategy(e, [1, 2])
    assert got.strategies == () and dict(got.split_rule) == {1: e.min_per_gpu(1), 2: e.min_per_gpu(2)}


def test_counts_must_be_positive_integers():
    e = vramwise.estimate(SMALL, **FULL)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(vramwise.SettingsError):
            per_gpu_by_strategy(e, [bad])
    assert per_gpu_by_strategy(e, [], registry=Registry.default()).cells == ()
