"""Fit.advice: what to change so a run fits. Every figure is checked against an independent call of
vramwise.estimate at the changed settings, and "fits" against the usable bytes by the placement rule
restated here; the one case with hand-written numbers derives them from the unsloth formulas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vramwise
from vramwise.answers.advice import KINDS, MAX_COMBINATION_ESTIMATES, MAX_ESTIMATES, advise
from vramwise.answers.fit import MAX_GPUS, fit
from vramwise.estimation.size_only import size_only_model
from vramwise.errors import SettingsError
from vramwise.estimation.registry import Registry

GIB = 2**30
LLAMA = str(Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")

#: Runs that do not fit, of every kind of advice: (fit arguments).
CASES = {
    "hf lora, no checkpointing": dict(gpu=24 * GIB, method="lora", profile="hf", batch_size=8,
                                      gradient_checkpointing="none", optimizer="adamw_torch"),
    "hf full on one GPU": dict(gpu=24 * GIB, method="full", profile="hf", batch_size=8, gradient_checkpointing="none",
                               optimizer="adamw_torch"),
    "hf full on two GPUs": dict(gpu=40 * GIB, gpus=2, method="full", profile="hf", batch_size=4, optimizer="adamw_torch"),
    "hf zero2 on four GPUs": dict(gpu=40 * GIB, gpus=4, method="full", profile="hf", batch_size=4,
                                  optimizer="adamw_torch", strategy="zero2"),
    "torchtune lora": dict(gpu=24 * GIB, method="lora", profile="torchtune", batch_size=8,
                           gradient_checkpointing="none", optimizer="adamw_torch"),
    "litgpt lora on 8 GiB": dict(gpu=8 * GIB, method="lora", profile="litgpt", batch_size=8,
                                 gradient_checkpointing="none", optimizer="adamw_torch"),
    "unsloth lora": dict(gpu=12 * GIB, method="lora", profile="unsloth", batch_size=8),
    "unsloth full": dict(gpu=12 * GIB, method="full", profile="unsloth", batch_size=8, gradient_checkpointing="none"),
    "headroom and batch 6": dict(gpu=24 * GIB, headroom=0.1, method="lora", profile="hf", batch_size=6,
                                 gradient_checkpointing="none"),
}


def _per_gpu(est, k: int, model=LLAMA) -> tuple[int, bool]:
    """What each of k GPUs holds, restated, and whether a strategy places it: under the run's strategy, or
    on one GPU, min_per_gpu(k); without one on several GPUs, the least of the run estimated under each
    strategy the profile models on k GPUs (the strategies manifest's list; those that refuse left out),
    except on a profile whose only strategies are the manifest's variants for it (its split rule)."""
    reg = Registry.default()
    names = reg.strategies_of(est.profile)
    own = [s for s in names if est.profile not in (reg.strategy_info(s).get("variants") or {})]
    if est.strategy is not None or k == 1 or not own:
        return est.min_per_gpu(k), est.strategy is not None
    figures = []
    for s in names:
        try:
            figures.append(vramwise.estimate(model, profile=est.profile,
                                             **{**est.settings.to_dict(), "strategy": s, "world_size": k}).total)
        except SettingsError:
            pass
    return min(figures), True


def _rule(est, k: int, usable: int, share: float, model=LLAMA) -> bool:
    """The placement rule, restated: each of k GPUs holds what is placed on it (_per_gpu); placed by the
    profile's split rule, the first GPU in full plus share of the others covers the total."""
    per, by_strategy = _per_gpu(est, k, model)
    if per > usable:
        return False
    return by_strategy or est.total <= usable + share * usable * (k - 1)


def _at(f, profile: str, changes: dict, model=LLAMA):
    """An independent estimate of the fit's settings with the advice's changes."""
    settings = dict(f.settings)
    settings.update({k: v for k, v in changes.items() if k not in ("gradient_accumulation_steps", "gpus")})
    return vramwise.estimate(model, profile=profile, **settings)


@pytest.fixture(scope="module")
def fits():
    # the whole GPU unless a case gives a headroom: the derivations count the GPU's memory
    return {name: fit(LLAMA, seq_lens=(), **{"headroom": 0, **kw}) for name, kw in CASES.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_each_entry_is_the_estimate_at_its_changes(fits, name):
    f, profile = fits[name], CASES[name]["profile"]
    assert not f.fits and f.advice
    for a in f.advice:
        e = _at(f, profile, a.changes)
        assert a.per_gpu == _per_gpu(e, a.gpus)[0], a
        assert a.total == e.total, a
        assert a.fits == _rule(e, a.gpus, f.usable_bytes, f.further_gpu_share), a
        assert a.gpus == a.changes.get("gpus", f.gpus)
        if "gradient_accumulation_steps" in a.changes:  # the effective batch is kept
            assert a.changes["batch_size"] * a.changes["gradient_accumulation_steps"] == f.settings["batch_size"]
        assert set(a.kinds) <= set(KINDS) and a.cost == sum(KINDS.index(k) + 1 for k in a.kinds)
        base = (_per_gpu(f.estimate, f.gpus)[0], f.estimate.total)  # every change lowers the need
        assert a.per_gpu < base[0] or (a.per_gpu == base[0] and a.total < base[1]) or a.gpus > f.gpus


@pytest.mark.parametrize("name", list(CASES))
def test_ranked_fitting_first_then_by_cost(fits, name):
    advice = fits[name].advice
    assert [a.rank for a in advice] == list(range(1, len(advice) + 1))
    keys = [(not a.fits, a.cost) for a in advice]
    assert keys == sorted(keys)


def test_kinds_in_the_order_of_the_least_change():
    # the order of the issue: the same effective batch, checkpointing, an 8-bit or paged optimizer, a
    # chunked or fused loss, fewer LoRA targets or a lower rank, QLoRA, a shorter sequence, offload, a
    # strategy or more GPUs
    assert KINDS == ("accumulation", "checkpointing", "optimizer", "loss", "lora_targets", "lora_rank", "qlora",
                     "seq_len", "offload", "strategy", "gpus")


def test_empty_when_it_fits():
    f = fit(LLAMA, gpu=80 * GIB, seq_lens=())
    assert f.fits and f.advice == () and f.to_dict()["advice"] == []


def test_hand_derived_only_batch_one_with_accumulation_fits():
    # examples/llama-3.1-8b.json, profile studio (the estimator's arithmetic), QLoRA at its defaults (rank 16
    # on the seven projections, unsloth checkpointing, adamw_8bit), seq 2048, batch 8. formulas/studio:
    #   activations per token of the largest layer (activations.yaml layer_activation_bytes):
    #     (q 4096 + 2 x kv 1024 + 2 + 2 x mlp 14336) elements x 2 bytes x 1.25 slack = 87,045 bytes;
    #     unsloth checkpointing on an adapter keeps one layer (gc_adapter 1): A(b) = 87,045 x 2048 x b
    #     = 178,268,160 x b.
    #   gradients (gradients.yaml): max(2 x 41,943,040 LoRA params, min(15 % of the weights,
    #     max(A(b), optimizer))) = A(b) for b <= 5 (A(5) = 891,340,800 < 0.15 x 6,463,954,944).
    #   the rest does not change with the batch: weights 6,463,954,944 + LoRA 83,886,080 + optimizer
    #     167,772,160 + CUDA overhead 1,503,238,554 = 8,218,851,738.
    #   total(1) = 8,218,851,738 + 2 x 178,268,160 = 8,575,388,058; total(2) = 8,931,924,378.
    # On one GPU of 8,700,000,000 bytes batch 1 fits and batch 2 does not: of the divisors of 8 only
    # batch 1 (x 8 steps) keeps the effective batch. The other changes of the settings save little:
    # attention-only targets save (41,943,040 - 13,631,488) params x (2 LoRA + 4 optimizer bytes) =
    # 169,869,312 bytes of the 10.6 GB that batch 8 needs; a lower rank less. Checkpointing and the
    # optimizer are already the lightest, and this profile does not read the loss.
    gpu = 8_700_000_000
    f = fit(LLAMA, gpu=gpu, headroom=0, profile="studio", method="qlora", batch_size=8, seq_lens=())
    rest = 6_463_954_944 + 83_886_080 + 167_772_160 + 1_503_238_554
    assert rest + 2 * 178_268_160 == vramwise.estimate(LLAMA, profile="studio", batch_size=1).total == 8_575_388_058
    assert not f.fits
    first = f.advice[0]
    assert first.kinds == ("accumulation",) and first.fits
    assert dict(first.changes) == {"batch_size": 1, "gradient_accumulation_steps": 8}
    assert first.per_gpu == first.total == 8_575_388_058
    same_gpus = [a for a in f.advice if a.gpus == 1 and a.kinds != ("seq_len",)]
    assert [a.kinds for a in same_gpus if a.fits] == [("accumulation",)]
    assert {a.kinds for a in same_gpus} == {("accumulation",), ("lora_targets",), ("lora_rank",)}
    targets = next(a for a in f.advice if a.kinds == ("lora_targets",))
    assert set(targets.changes["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert f.estimate.total - targets.total == 169_869_312
    # the shorter sequence and the second GPU fit too, ranked after it
    assert [a.kinds for a in f.advice if a.fits] == [("accumulation",), ("seq_len",), ("gpus",)]


def test_no_lora_advice_for_full_fine_tuning(fits):
    for name in ("hf full on one GPU", "hf full on two GPUs", "hf zero2 on four GPUs", "unsloth full"):
        for a in fits[name].advice:
            assert not set(a.kinds) & {"lora_targets", "lora_rank", "qlora"}
            assert not set(a.changes) & {"lora_rank", "target_modules", "method", "load_in_4bit"}


def test_only_what_the_profile_models(fits):
    # unsloth reads no loss setting; litgpt's tables list neither paged_adamw_8bit nor a fused loss
    # (formulas/litgpt/optimizer.yaml, logits.yaml); on hf, unsloth checkpointing costs what true costs
    assert all("loss" not in a.changes for name in ("unsloth lora", "unsloth full") for a in fits[name].advice)
    litgpt = [a.changes for a in fits["litgpt lora on 8 GiB"].advice]
    assert all(c.get("optimizer") != "paged_adamw_8bit" and c.get("loss") != "fused" for c in litgpt)
    assert all(c.get("gradient_checkpointing") != "unsloth" for name in CASES if CASES[name]["profile"] == "hf"
               for c in (a.changes for a in fits[name].advice))
    # strategies are modelled on the hf profile only
    assert all(not set(a.changes) & {"strategy", "offload"} for name in CASES if CASES[name]["profile"] != "hf"
               for a in fits[name].advice)


def test_combinations_when_no_single_change_fits(fits):
    f = fits["hf lora, no checkpointing"]
    singles = [a for a in f.advice if len(a.kinds) == 1 and a.kinds[0] not in ("seq_len", "strategy", "gpus")]
    assert singles and not any(a.fits for a in singles)
    combos = [a for a in f.advice if len(a.kinds) > 1]
    assert combos and combos[0].fits and combos[0] is f.advice[0]
    # minimal: without any one of its kinds the rest does not fit (independent estimates)
    by_kind = {a.kinds[0]: a.changes for a in singles}
    combo = combos[0]
    for drop in combo.kinds:
        rest = {}
        for k in combo.kinds:
            if k != drop:
                rest.update({n: v for n, v in combo.changes.items() if n in by_kind.get(k, {})})
        e = _at(f, "hf", rest)
        assert not _rule(e, 1, f.usable_bytes, f.further_gpu_share), drop
    # a full fine-tuning that needs a strategy with host offload as well as the batch of 1
    full = fits["hf full on one GPU"].advice[0]
    assert full.fits and set(full.kinds) == {"accumulation", "strategy"}


def test_advice_is_bounded_in_estimates():
    kw = dict(CASES["hf lora, no checkpointing"])
    f = fit(LLAMA, seq_lens=(), **kw)
    reg = Registry.default()
    prof = reg.profile("hf")
    calls = []

    def counted(limit, combination_limit):
        calls.clear()

        def estimate_at(changes):
            calls.append(changes)
            return vramwise.estimate(LLAMA, profile="hf", **{**f.settings, **changes})

        return advise(f.estimate, estimate_at, gpus=1, usable=f.usable_bytes, share=f.further_gpu_share, profile=prof,
                      registry=reg, max_batch_size=f.max_batch_size, max_seq_len=f.max_seq_len,
                      max_lora_rank=f.max_lora_rank, min_gpus=f.min_gpus, max_gpus=MAX_GPUS, limit=limit,
                      combination_limit=combination_limit)

    full = counted(MAX_ESTIMATES, MAX_COMBINATION_ESTIMATES)
    assert [a.to_dict() for a in full] == [a.to_dict() for a in f.advice]
    assert 0 < len(calls) <= MAX_ESTIMATES
    for limit in (0, 3, 8):  # a smaller budget: fewer entries, never more estimates, every entry still exact
        small = counted(limit, MAX_COMBINATION_ESTIMATES)
        assert len(calls) <= limit
        for a in small:
            e = _at(f, "hf", a.changes)
            assert a.per_gpu == _per_gpu(e, a.gpus)[0] and a.fits == _rule(e, a.gpus, f.usable_bytes, f.further_gpu_share)
    counted(MAX_ESTIMATES, 0)  # no budget for combinations: the single changes only
    singles_only = len(calls)
    counted(MAX_ESTIMATES, MAX_COMBINATION_ESTIMATES)
    assert len(calls) - singles_only <= MAX_COMBINATION_ESTIMATES


class _RecipeDouble:
    """What fit reads of a recipe: the model, settings, profile, extras and write()."""

    def __init__(self, settings: dict, extras: dict):
        self.model = LLAMA
        self.settings = {**{s.name: s.default for s in vramwise.SETTINGS}, **settings}
        self.profile = "hf"
        self.extras = extras
        self.path = "recipe.yaml"
        self.written = []

    KEYS = {"batch_size": "micro_batch_size", "gradient_accumulation_steps": "gradient_accumulation_steps",
            "gradient_checkpointing": "gradient_checkpointing", "optimizer": "optimizer", "seq_len": "sequence_len"}

    def write(self, changes):
        self.written.append(dict(changes))
        return {self.KEYS.get(k, k): (v == "true" if k == "gradient_checkpointing" else v) for k, v in changes.items()}


def test_recipe_advice_in_the_recipe_keys():
    recipe = _RecipeDouble({"method": "lora", "batch_size": 8, "gradient_checkpointing": "none",
                            "optimizer": "adamw_torch"}, {"gradient_accumulation_steps": 2})
    f = fit(recipe, gpu=24 * GIB, seq_lens=())
    plain = fit(LLAMA, gpu=24 * GIB, seq_lens=(), profile="hf", method="lora", batch_size=8,
                gradient_checkpointing="none", optimizer="adamw_torch")
    assert f.profile == "hf" and not f.fits
    assert [a.per_gpu for a in f.advice] == [a.per_gpu for a in plain.advice]
    for a in f.advice:
        wanted = {k: v for k, v in a.changes.items() if k != "gpus"}
        keys = _RecipeDouble.KEYS
        assert a.recipe_changes == {keys.get(k, k): (v == "true" if k == "gradient_checkpointing" else v)
                                    for k, v in wanted.items()}
        if "gradient_accumulation_steps" in a.changes:  # the recipe's 2 steps times the smaller batch's factor
            assert a.changes["gradient_accumulation_steps"] == 2 * 8 // a.changes["batch_size"]
            assert a.recipe_changes["micro_batch_size"] == a.changes["batch_size"]
    assert recipe.written and all("gpus" not in w for w in recipe.written)
    assert json.loads(json.dumps(f.to_dict()))["advice"][0]["recipe_changes"] == dict(f.advice[0].recipe_changes)


def test_recipe_world_size_is_the_gpus():
    recipe = _RecipeDouble({"method": "full", "batch_size": 4, "optimizer": "adamw_torch", "strategy": "zero2",
                            "world_size": 4}, {})
    f = fit(recipe, gpu=40 * GIB, seq_lens=())
    assert f.gpus == 4 and f.estimate.world_size == 4
    again = fit(recipe, gpu=40 * GIB, gpus=8, seq_lens=())
    assert again.gpus == 8 and again.estimate.world_size == 8


def test_json_cli_and_server_carry_the_advice(capsys):
    from vramwise.surfaces.cli.main import main
    from vramwise.surfaces.serve import api_fit

    args = ["fit", LLAMA, "--gpu", "24GiB", "--profile", "hf", "--method", "lora", "--batch-size", "8",
            "--gradient-checkpointing", "none", "--optimizer", "adamw_torch"]
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    f = fit(LLAMA, gpu="24GiB", profile="hf", method="lora", batch_size=8, gradient_checkpointing="none",
            optimizer="adamw_torch")
    assert data["advice"] == json.loads(json.dumps(f.to_dict()))["advice"] and data["advice"]
    served = api_fit({"config": json.loads(Path(LLAMA).read_text()), "gpu": "24GiB", "profile": "hf", "method": "lora", "batch_size": 8,
                      "gradient_checkpointing": "none", "optimizer": "adamw_torch"})
    assert json.loads(json.dumps(served))["advice"] == data["advice"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "advice: what to change so it fits" in out
    first = f.advice[0]
    assert f"  1. {first.per_gpu / GIB:,.2f} GiB per GPU, fits: " in out
    assert "set batch_size=1, gradient_accumulation_steps=8, gradient_checkpointing=true" in out


def test_cli_says_when_nothing_fits(capsys):
    from vramwise.surfaces.cli.main import main

    assert main(["fit", LLAMA, "--gpu", "8GiB", "--profile", "litgpt", "--method", "lora", "--batch-size", "8",
                 "--optimizer", "adamw_torch"]) == 0
    out = capsys.readouterr().out
    assert "no change found makes it fit, alone or combined" in out
    assert main(["fit", LLAMA, "--gpu", "80GiB"]) == 0
    assert "advice:" not in capsys.readouterr().out


def test_axolotl_recipe_advice_in_axolotl_keys():
    # tests/fixtures/recipes/axolotl/llama-3-lora-1b.yml: micro_batch_size 2, gradient_accumulation_steps 2
    # (lines 39-40), so the same effective batch of 4 is micro_batch_size 1 with 4 steps, in axolotl's own
    # keys (axolotl's config schema names both). The model is replaced by the bundled Llama 3.1 8B, which
    # does not fit 12 GiB at these settings.
    read_recipe = getattr(vramwise, "read_recipe", None)
    if read_recipe is None:
        pytest.skip("no recipe reader")
    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "axolotl" / "llama-3-lora-1b.yml"
    recipe = read_recipe(str(fixture), overrides={"model": LLAMA})
    f = fit(recipe, gpu=12 * GIB, seq_lens=())
    assert not f.fits
    acc = next(a for a in f.advice if a.kinds == ("accumulation",))
    assert dict(acc.changes) == {"batch_size": 1, "gradient_accumulation_steps": 4}
    assert acc.recipe_changes == {"micro_batch_size": 1, "gradient_accumulation_steps": 4}
    e = vramwise.estimate(LLAMA, profile=recipe.profile, **{**recipe.settings, "batch_size": 1})
    assert acc.per_gpu == e.min_per_gpu(1)


def test_cli_fit_of_a_recipe_prints_its_keys(capsys):
    # the same recipe as above, read by `vramwise fit --recipe`: the advice in axolotl's keys
    from vramwise.surfaces.cli.main import main

    if getattr(vramwise, "read_recipe", None) is None:
        pytest.skip("no recipe reader")
    fixture = str(Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "axolotl" / "llama-3-lora-1b.yml")
    args = ["fit", "--recipe", fixture, "--set", f"model={LLAMA}", "--gpu", "12GiB"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "in the recipe: micro_batch_size: 1, gradient_accumulation_steps: 4" in out
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    acc = next(a for a in data["advice"] if a["kinds"] == ["accumulation"])
    assert acc["recipe_changes"] == {"micro_batch_size": 1, "gradient_accumulation_steps": 4}


def test_a_combination_with_more_gpus_needs_fewer_than_the_gpus_alone():
    # QLoRA of the 8B model at batch 1 on 4 GiB GPUs: the cheap changes do not fit even together, and
    # on the fewest GPUs for all of them none is needed, so no combination is listed beside the GPUs alone.
    # The headroom is given (20 %, 3.2 GiB usable) so that the case does not move with the device bands
    f = fit(LLAMA, gpu=4 * GIB, method="qlora", batch_size=1, seq_lens=(), headroom=0.2)
    assert [a.kinds for a in f.advice if a.fits] == [("gpus",)]
    # with 3.87 GiB usable (3.15 % headroom) the four attention projections alone on 2 GPUs (3.86 GiB each)
    # take fewer GPUs than the GPUs alone (4), and the combination is listed
    f = fit(LLAMA, gpu=4 * GIB, method="qlora", batch_size=1, seq_lens=(), headroom=0.0315)
    kinds = [a.kinds for a in f.advice if a.fits]
    assert kinds == [("gpus",), ("lora_targets", "gpus")]
    assert f.advice[1].gpus < f.advice[0].gpus
    # a 70B model known by its size, batch 4 on 24 GiB GPUs: a smaller batch with more steps on fewer
    # GPUs than more GPUs alone need; without the smaller batch it does not fit on those GPUs. Without a
    # strategy the GPUs split one replica, so the effective batch is batch x steps = 4, and the GPU
    # counts are those machines come in (1, 2, 4, 8, 16...)
    spec = size_only_model(params=70e9)
    f = fit(spec, gpu=24 * GIB, profile="size_only", batch_size=4, target_modules=None, seq_lens=())
    alone = next(a for a in f.advice if a.kinds == ("gpus",))
    combo = next(a for a in f.advice if a.kinds == ("accumulation", "gpus"))
    assert combo.fits and combo.gpus < alone.gpus and {combo.gpus, alone.gpus} <= {1, 2, 4, 8, 16, 24, 32}
    b = combo.changes["batch_size"]
    assert dict(combo.changes) == {"batch_size": b, "gradient_accumulation_steps": 4 // b, "gpus": combo.gpus}
    assert b < 4 and 4 % b == 0
    e = vramwise.estimate(spec, profile="size_only", target_modules=None, batch_size=b)
    assert combo.per_gpu == e.min_per_gpu(combo.gpus) and _rule(e, combo.gpus, f.usable_bytes, f.further_gpu_share, spec)
    e4 = vramwise.estimate(spec, profile="size_only", target_modules=None, batch_size=4)
    assert not _rule(e4, combo.gpus, f.usable_bytes, f.further_gpu_share, spec)
