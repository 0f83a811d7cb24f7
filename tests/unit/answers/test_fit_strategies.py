"""Per GPU means a strategy in fit, select_gpus and the advice: on several GPUs without a strategy a run is
judged by what the best strategy its profile models places on each GPU, not by the profile's ideal split.

Every expected figure comes from an independent path through the public API: the same settings estimated
again with ``vramwise.estimate(..., strategy=s, world_size=n)`` for each strategy the strategies manifest
lists for the profile (formulas/strategies/strategies.yaml), the least of them being the best (a tie to the
first listed). The worked case: the bundled Llama 3.1 8B (examples/llama-3.1-8b.json), profile hf, full
fine-tuning with adamw_torch, gradient checkpointing, batch 4 x 2048, on GPUs of 24 GiB with no headroom:

* the ideal split (hf's min_per_gpu, the model states divided by n) would say 5 GPUs: the pooled rule needs
  total <= 24 x (1 + 0.85 x (n - 1)) GiB, and the total, about 86.5 GiB, first fits that at n = 5
  (24 x 4.4 = 105.6; n = 4 gives 24 x 3.55 = 85.2), where the ideal split is about 17.7 GiB per GPU;
* every strategy on 7 GPUs needs more than 24 GiB per GPU (device_map, the least, about 25.0), on 8 GPUs
  device_map needs about 23.6: the fewest GPUs are 8, with device_map.

The approximate figures are for the reader; the assertions compare the exact bytes of the independent calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vramwise
from vramwise.answers.fit import fit
from vramwise.answers.placement import Placer
from vramwise.errors import SettingsError
from vramwise.estimation.registry import Registry

GIB = 2**30
EXAMPLE = str(Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")
RUN = dict(profile="hf", method="full", optimizer="adamw_torch", gradient_checkpointing="true", batch_size=4,
           seq_len=2048)
# the manifest's strategies for hf, in its order (formulas/strategies/strategies.yaml)
HF_STRATEGIES = ("ddp", "fsdp", "fsdp_shard_grad_op", "fsdp_hybrid", "zero1", "zero2", "zero3", "device_map")


def _best(n: int, **changes) -> tuple[str, int]:
    """The least per-GPU figure of the strategies on n GPUs, each its own estimate (a tie to the first listed)."""
    figures = {}
    for s in HF_STRATEGIES:
        try:
            figures[s] = vramwise.estimate(EXAMPLE, **{**RUN, **changes}, strategy=s, world_size=n).total
        except SettingsError:  # device_map refuses one GPU
            pass
    least = min(figures.values())
    return next(s for s in HF_STRATEGIES if figures.get(s) == least), least


def test_the_manifest_lists_these_strategies_for_hf():
    assert tuple(Registry.default().strategies_of("hf")) == HF_STRATEGIES


def test_fewest_gpus_are_those_a_strategy_fits_not_the_ideal_split():
    e = vramwise.estimate(EXAMPLE, **RUN)
    # the ideal split's answer, 5 GPUs: per-GPU minimum and pooled total both fit at 5, the pool not at 4
    assert e.min_per_gpu(5) <= 24 * GIB and e.total <= 24 * GIB * (1 + 0.85 * 4)
    assert e.total > 24 * GIB * (1 + 0.85 * 3)
    # every strategy: more than 24 GiB per GPU on 7 GPUs, device_map fits on 8
    assert _best(7)[1] > 24 * GIB
    name, need = _best(8)
    assert name == "device_map" and need <= 24 * GIB
    f = fit(EXAMPLE, gpu=24 * GIB, headroom=0, seq_lens=(), **RUN)
    assert f.min_gpus == 8
    assert (f.min_gpus_placement.strategy, f.min_gpus_placement.per_gpu, f.min_gpus_placement.best) == (
        "device_map", need, True)
    data = f.to_dict()
    assert (data["min_gpus"], data["min_gpus_per_gpu"], data["min_gpus_strategy"]) == (8, need, "device_map")


def test_fit_on_several_gpus_judges_by_the_best_strategy_and_names_it():
    name, need = _best(8)
    f = fit(EXAMPLE, gpu=24 * GIB, gpus=8, headroom=0, seq_lens=(), **RUN)
    e = f.estimate
    assert e.strategy is None and f.fits
    assert (f.placement.strategy, f.placement.per_gpu) == (name, need)
    assert f.verdict.label == "fits" and f.verdict.margin_bytes == 24 * GIB - need
    assert f.verdict.head().startswith("fits on 8 GPUs with device_map, ")
    assert "best strategy" in f.rule and "device_map" in f.rule
    data = json.loads(json.dumps(f.to_dict()))
    assert (data["per_gpu"], data["per_gpu_strategy"], data["verdict"]["placed"]) == (
        need, "device_map", "on 8 GPUs with device_map")
    full = next(m for m in f.methods if m.method == "full")
    assert (full.per_gpu, full.strategy, full.fits) == (need, "device_map", True)
    # on 4 GPUs the ideal split (22 GiB) would fit 24 GiB; the best strategy does not
    name4, need4 = _best(4)
    assert e.min_per_gpu(4) <= 24 * GIB < need4
    f4 = fit(EXAMPLE, gpu=24 * GIB, gpus=4, headroom=0, seq_lens=(), **RUN)
    assert not f4.fits and f4.verdict.label == "does not fit" and f4.placement.per_gpu == need4
    assert f4.verdict.head() == (f"does not fit on 4 GPUs with {name4}, {(need4 - 24 * GIB) / GIB:.2f} GiB short of "
                                 "24.00 GiB per GPU")


def test_a_largest_batch_on_several_gpus_is_the_best_strategys():
    f = fit(EXAMPLE, gpu=24 * GIB, gpus=8, headroom=0, seq_lens=(), **RUN)
    b = f.max_batch_size
    assert b is not None
    assert _best(8, batch_size=b)[1] <= 24 * GIB < _best(8, batch_size=b + 1)[1]


def test_the_advice_for_more_gpus_names_the_strategy():
    name, need = _best(8)
    f = fit(EXAMPLE, gpu=24 * GIB, headroom=0, seq_lens=(), **RUN)  # one GPU: 86.5 GiB does not fit
    assert not f.fits and f.placement.strategy is None and f.placement.per_gpu == f.estimate.total
    more = next(a for a in f.advice if a.kinds == ("gpus",))
    # machine counts 1, 2, 4, 8: the first at or above the fewest (8) is 8
    assert (more.gpus, more.per_gpu, more.strategy, more.fits) == (8, need, "device_map", True)
    assert more.to_dict()["strategy"] == "device_map"
    # one entry per change: ZeRO-3 offloading the parameters fits alone, and the combination search, which
    # reaches the same change once made minimal, does not list it again
    keys = [tuple(sorted(a.changes.items())) for a in f.advice]
    assert len(keys) == len(set(keys))
    assert sum(1 for a in f.advice if a.kinds == ("strategy",)) == 1


def test_the_cli_names_the_strategy(capsys):
    from vramwise.surfaces.cli.main import main

    name, need = _best(8)
    args = ["fit", EXAMPLE, "--gpu", "24GiB", "--headroom", "0", "--profile", "hf", "--method", "full",
            "--optimizer", "adamw_torch", "--gradient-checkpointing", "true", "--batch-size", "4", "--seq-len", "2048",
            "--seq-lens", "2048"]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{need / GIB:.2f} GiB per GPU on 8 GPUs with device_map, fits: 8 GPUs instead of 1" in out
    fewest = out[out.index("fewest GPUs:"):out.index("frontier:")]
    assert fewest.startswith("fewest GPUs: 8 x ") and f"on 8 GPUs with device_map" in fewest
    assert f"{need / GIB:.2f} GiB on each" in fewest
    assert main(args + ["--gpus", "8"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"on 8 GPUs with device_map: {need / GIB:.2f} GiB per GPU" in out


def test_a_strategy_given_keeps_its_own_rank_figure():
    f = fit(EXAMPLE, gpu=24 * GIB, gpus=8, headroom=0, seq_lens=(), strategy="fsdp", **RUN)
    fsdp = vramwise.estimate(EXAMPLE, **RUN, strategy="fsdp", world_size=8).total
    assert (f.placement.strategy, f.placement.best, f.placement.per_gpu) == ("fsdp", False, fsdp)
    assert f.to_dict()["per_gpu_strategy"] is None


def test_a_profile_whose_placement_is_its_split_rule_is_unchanged():
    # unsloth's strategies are the manifest's variants for it: its split rule places the run
    f = fit(EXAMPLE, gpu=24 * GIB, gpus=2, headroom=0, seq_lens=(), profile="unsloth", method="lora")
    e = f.estimate
    assert f.placement.strategy is None and f.placement.per_gpu == e.min_per_gpu(2)
    assert f.fits == (e.min_per_gpu(2) <= 24 * GIB and e.total <= 24 * GIB * 1.85)


def test_select_gpus_on_a_mixed_box_takes_the_gpus_a_strategy_fits():
    from unit.gpus.test_gpus import FakeNvml, gpu  # tests/ is on sys.path (pyproject.toml: pythonpath)

    from vramwise import discover_gpus, select_gpus

    # free: GPU 0 24, GPU 1 20, GPU 2 30, GPUs 3-8 24 GiB -> ranked 2, 0, 3, 4, 5, 6, 7, 8, 1
    box = [gpu(0, 24), gpu(1, 20), gpu(2, 30)] + [gpu(i, 24) for i in range(3, 9)]
    d = discover_gpus(nvml=FakeNvml(box), env={})
    e = vramwise.estimate(EXAMPLE, **RUN)
    # the ideal split would take 4: 30 + 0.85 x 24 x 3 = 91.2 GiB covers the total, 22 GiB each fits 24
    assert e.total <= (30 + 0.85 * 24 * 3) * GIB and e.min_per_gpu(4) <= 24 * GIB
    assert _best(7)[1] > 24 * GIB  # 2..7 GPUs: the smallest free is 24 GiB, every strategy needs more
    name, need = _best(8)
    sel = select_gpus(e, discovery=d)
    assert (sel.mode, sel.fits, sel.strategy, sel.min_per_gpu_bytes) == ("auto", True, name, need)
    assert sel.gpu_ids == (2, 0, 3, 4, 5, 6, 7, 8)  # the eight with most free memory, GPU 1 (20 GiB) left out
    assert f"with {name}" in sel.reason and sel.to_dict()["strategy"] == name
    # explicit ids: the strategy's figure on them
    sel = select_gpus(e, gpu_ids=[0, 1], discovery=d)
    name2, need2 = _best(2)
    assert (sel.fits, sel.min_per_gpu_bytes, sel.strategy) == (False, need2, name2)


def test_one_placer_estimates_each_setting_and_count_once(monkeypatch):
    import vramwise.estimation.estimate as estimate_module

    e = vramwise.estimate(EXAMPLE, **RUN)
    calls = []
    real = estimate_module.estimate

    def counting(*a, **k):
        if k.get("strategy") is not None:  # the strategies' estimates the placer makes
            calls.append((k["strategy"], k["world_size"]))
        return real(*a, **k)

    monkeypatch.setattr(estimate_module, "estimate", counting)
    placer = Placer()
    first = placer.place(e, 8)
    assert sorted(calls) == sorted((s, 8) for s in HF_STRATEGIES)  # one estimate per strategy on 8 GPUs
    again = placer.place(vramwise.estimate(EXAMPLE, **RUN), 8)  # the same settings, another Estimate object
    assert again == first and len(calls) == len(HF_STRATEGIES)  # remembered
    assert placer.place(e, 1).strategy is None and len(calls) == len(HF_STRATEGIES)  # one GPU: no strategy
    Placer().place(e, 8)  # another answer's placer remembers nothing of this one's
    assert len(calls) == 2 * len(HF_STRATEGIES)


def test_compare_on_several_gpus_judges_each_cell_by_the_best_strategy():
    # 8 GPUs of 24 GiB at the device band's headroom (hf, full): usable 24 x (1 - p90 shortfall). The ideal
    # split (about 11.3 GiB each, and the pool covers the 86.5 GiB total) would fit that; device_map's about
    # 23.6 GiB fits the whole GPU but not with the headroom free: tight
    name, need = _best(8)
    e = vramwise.estimate(EXAMPLE, **RUN)
    usable = int(24 * GIB * (1 - e.error_band.device.p90_shortfall))
    assert e.min_per_gpu(8) <= usable and e.total <= usable * (1 + 0.85 * 7)  # the ideal split's "fits"
    assert usable < need <= 24 * GIB
    settings = {k: v for k, v in RUN.items() if k not in ("profile", "method")}
    c = vramwise.compare(EXAMPLE, methods=("full",), profiles=("hf",), gpu=24 * GIB, gpus=8, **settings)
    assert c.verdicts == ("tight",) and c.cells[0][4] is False
