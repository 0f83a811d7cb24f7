"""The mlx profile: mlx-lm v0.31.3's LoRA, QLoRA and full fine-tuning (formulas/mlx).

Parameter and adapter counts are checked against the model transformers builds on the meta device (an
independent count of every module's weight shape) and against the trainable parameters mlx-lm itself printed
in a published run; bytes are derived by hand below from the rules formulas/mlx cites. The published peak-memory
reports (benchmarks/mlx_reports.yaml) are compared as ratios, without any factor taken from them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import vramwise
from helpers import reference_params  # tests/helpers.py: transformers' model on the meta device

REPO = Path(__file__).resolve().parents[3]

# A small Qwen2 (biases on q, k, v; tied embedding): 4 layers, hidden 256, 4 heads of 64, 2 KV heads, MLP 512,
# vocabulary 1000. Every width is a multiple of MLX's quantization group (64).
QWEN2 = {"model_type": "qwen2", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 1000, "max_position_embeddings": 2048,
         "tie_word_embeddings": True}
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def mlx(config=QWEN2, **settings):
    settings.setdefault("optimizer", "adam")
    return vramwise.estimate(dict(config), profile="mlx", **settings)


@pytest.fixture(scope="module")
def meta():
    """Parameters per module path of the transformers model, and the (in, out) widths of each projection."""
    per_module = reference_params(QWEN2)
    return per_module


def _widths(meta, leaf: str) -> int:
    """in + out of one layer's projection ``leaf``, from its parameter count on the meta device: out x in
    weights (plus out biases for q, k, v), and the config's hidden size on one side."""
    n = meta[f"model.layers.0.{'self_attn' if leaf in PROJECTIONS[:4] else 'mlp'}.{leaf}"]
    hidden = QWEN2["hidden_size"]
    if leaf in ("q_proj", "k_proj", "v_proj"):  # hidden -> out, with a bias of out: n = out x (hidden + 1)
        return hidden + n // (hidden + 1)
    return hidden + n // hidden  # o_proj, gate, up, down: one side is hidden, no bias


@pytest.mark.parametrize("leaf", PROJECTIONS)
def test_adapters_per_module_kind_on_the_last_layers_only(meta, leaf):
    # mlx-lm's LoRALinear: lora_a input_dims x r, lora_b r x output_dims (mlx_lm/tuner/lora.py lines 88-93), on the
    # modules of model.layers[-num_layers:] only (mlx_lm/tuner/utils.py line 103); rank 8 on the last 3 of 4 layers
    e = mlx(method="lora", lora_rank=8, lora_layers=3, target_modules=[leaf], batch_size=1, seq_len=64)
    assert e.params_trainable == 3 * 8 * _widths(meta, leaf)
    # float32 adapters (4 bytes) and Adam's two float32 states
    assert e.lora == 4 * e.params_trainable
    assert e.figures["optimizer_state"] == 2 * 4 * e.params_trainable


def test_default_targets_are_every_linear_module_of_a_layer(meta):
    # with no keys mlx-lm adapts every nn.Linear of a layer (mlx_lm/tuner/utils.py lines 85-99): the 7 projections
    per_layer = sum(_widths(meta, leaf) for leaf in PROJECTIONS)
    e = mlx(method="lora", lora_rank=8, lora_layers=2, batch_size=1, seq_len=64)
    assert e.params_trainable == 2 * 8 * per_layer


def test_full_fine_tuning_unfreezes_the_last_layers_only(meta):
    # mlx_lm/lora.py lines 224-233: model.freeze(), then model.layers[-num_layers:] unfreeze (embedding, final
    # norm and head stay frozen); transformers' count of layers 2 and 3
    last_two = sum(n for path, n in meta.items() if path.startswith(("model.layers.2.", "model.layers.3.")))
    e = mlx(method="full", lora_layers=2, batch_size=1, seq_len=64)
    assert e.params_trainable == last_two
    # bf16 parameters: Adam's m and v in bf16 (mx.zeros_like(parameter)), 2 x 2 bytes each
    assert e.figures["optimizer_state"] == 2 * 2 * last_two


def test_quantized_weights_count_every_linear_weight_and_the_embedding(meta):
    # mx.quantize (affine, 4 bits, groups of 64): 0.5 byte a weight + a bf16 scale and bias per 64 = 0.5625 byte;
    # quantized: the layers' linear weights and the embedding (tied: the head is the embedding); the biases and
    # norms stay bf16
    total = sum(meta.values())
    # q, k, v carry a bias of out: out x (hidden + 1) parameters, of which out x hidden are weights
    linear_weights = 0
    for path, n in meta.items():
        leaf = path.rsplit(".", 1)[-1]
        if leaf in ("q_proj", "k_proj", "v_proj"):
            linear_weights += n // (QWEN2["hidden_size"] + 1) * QWEN2["hidden_size"]
        elif leaf in PROJECTIONS:
            linear_weights += n
    quantized = linear_weights + QWEN2["vocab_size"] * QWEN2["hidden_size"]
    e = mlx(method="qlora", lora_rank=8, batch_size=1, seq_len=64)
    assert e.weights == quantized * 0.5625 + (total - quantized) * 2
    assert mlx(method="lora", lora_rank=8, batch_size=1, seq_len=64).weights == total * 2


def test_the_trainable_parameters_mlx_lm_printed_for_llama_3_2_3b():
    # ml-explore/mlx-lm#330 (benchmarks/mlx_reports.yaml): "Trainable parameters: 0.041% (1.311M/3212.750M)" with
    # mlx-lm's defaults then: rank 8 on q_proj and v_proj of the last 16 layers. By hand: q 3072 -> 3072, v 3072
    # -> 1024 (8 KV heads of 128): 8 x (6144 + 4096) x 16 = 1,310,720, which mlx-lm rounds to 1.311M
    e = vramwise.estimate("meta-llama/Llama-3.2-3B-Instruct", profile="mlx", method="lora", lora_rank=8,
                          lora_layers=16, target_modules=["q_proj", "v_proj"], optimizer="adam")
    assert e.params_trainable == 8 * (6144 + 4096) * 16 == 1_310_720
    assert round(e.params_trainable / 1e6, 3) == 1.311


def test_checkpointing_keeps_each_trained_layer_input_and_recomputes_one():
    # without checkpointing every trained layer's arrays are kept; with grad_checkpoint (mx.checkpoint around each
    # layer) only each trained layer's input (hidden x 2 bytes a token) and one recomputed layer
    kw = dict(method="lora", lora_rank=8, lora_layers=4, batch_size=2, seq_len=512)
    assert mlx(gradient_checkpointing="true", **kw).total < mlx(gradient_checkpointing="none", **kw).total
    # the project's default checkpointing (unsloth) is no mlx-lm mode: it means mlx-lm's default, off
    assert mlx(gradient_checkpointing="unsloth", **kw).total == mlx(gradient_checkpointing="none", **kw).total


def test_more_layers_than_the_model_has_warns_as_mlx_lm_refuses():
    e = mlx(method="lora", lora_rank=8, lora_layers=16, batch_size=1, seq_len=64)
    assert any("mlx-lm refuses" in w for w in e.warnings)
    assert e.figures["trained_layers"] == 4


def test_optimizers_mlx_lm_builds():
    kw = dict(method="lora", lora_rank=8, lora_layers=2, batch_size=1, seq_len=64)
    adam = mlx(**kw)
    # SGD keeps one state, v, whatever its momentum (mlx optimizers.py SGD.init_single lines 268-270)
    assert mlx(**{**kw, "optimizer": "sgd"}).figures["optimizer_state"] == adam.figures["optimizer_state"] / 2
    # no 8-bit optimizer in mlx-lm: counted as Adam, with a warning
    eight = mlx(**{**kw, "optimizer": "adamw_8bit"})
    assert eight.figures["optimizer_state"] == adam.figures["optimizer_state"]
    assert any("not one mlx-lm builds" in w for w in eight.warnings)


def test_other_profiles_warn_that_they_ignore_lora_layers():
    e = vramwise.estimate(dict(QWEN2), profile="hf", method="lora", lora_layers=2, batch_size=1, seq_len=64)
    assert any("lora_layers" in w for w in e.warnings)


# -- the published reports ---------------------------------------------------------------------------------------

REPORTS = yaml.safe_load((REPO / "benchmarks" / "mlx_reports.yaml").read_text(encoding="utf-8"))["reports"]


def _settings(report) -> dict:
    s = {**report["settings"].get("from_defaults", {}), **report["settings"]["stated"]}
    s.setdefault("optimizer", "adam")
    return s


@pytest.mark.parametrize("report", REPORTS, ids=[r["id"] for r in REPORTS])
def test_each_report_is_quoted_with_its_settings(report):
    assert report["source"]["url"].startswith("https://") and report["source"]["quote"].strip()
    assert f"Peak mem {report['value']:.3f} GB" in report["source"]["quote"]
    assert not set(report["settings"]["stated"]) & set(report["settings"].get("from_defaults", {}))
    if report["scored"]:
        assert {"method", "batch_size", "seq_len", "lora_layers"} <= set(_settings(report))
    else:
        assert report["why_not_scored"].strip()
    if "trainable_params" in report:  # a count the source printed, rounded to 0.001M
        e = vramwise.estimate(report["model"], profile="mlx", **_settings(report))
        assert round(e.params_trainable / 1e6, 3) == report["trainable_params"] / 1e6


def test_how_far_the_profile_is_from_each_scored_report(capsys):
    # estimate / report for every scored report, printed (pytest -s shows them; docs/profiles.md#mlx lists them).
    # The one scored report predates MLX 0.25.0, whose unfused training attention the profile counts: above it.
    ratios = {}
    for r in REPORTS:
        if not r["scored"]:
            continue
        e = vramwise.estimate(r["model"], profile="mlx", **_settings(r))
        assert r["unit"] == "GB"
        ratios[r["id"]] = e.total / (r["value"] * 1e9)
    with capsys.disabled():
        for rid, ratio in ratios.items():
            print(f"\nmlx profile / published peak: {rid}: {ratio:.2f}")
    assert ratios and all(0.5 < x < 2.0 for x in ratios.values())


# -- where it runs (hardware/runs_on.yaml) ---------------------------------------------------------------------------


def test_on_a_mac_the_mlx_profile_is_refused_by_nothing_transformers_would_use():
    # mlx-lm runs on Apple silicon (its README); transformers' attention kernel and bitsandbytes are no part of it:
    # the mlx profile's formulas read neither attention nor load_in_4bit, so neither makes a thing used
    from vramwise.estimation.registry import Registry
    from vramwise.inputs.runs_on import check

    reads = Registry.default().profile("mlx").settings_read
    got = check("apple", "mlx", {"attention": "flash_attention_2", "load_in_4bit": True, "method": "qlora"},
                reads=reads)
    assert got.runs and not got.unknowns
    # the same settings under the hf profile: FlashAttention-2 does not run there
    assert not check("apple", "hf", {"attention": "flash_attention_2"}).runs


def test_fit_on_a_mac_answers_for_mlx_and_the_default_profile_points_to_it():
    f = vramwise.fit("meta-llama/Llama-3.1-8B", gpu="M3 Max 64GB", profile="mlx", method="qlora", lora_rank=8,
                     optimizer="adam", batch_size=1, seq_len=512)
    assert f.verdict.label != "does not run" and f.verdict.runs_on is None
    default = vramwise.fit("meta-llama/Llama-3.1-8B", gpu="M3 Max 64GB")
    assert default.verdict.label == "does not run"
    assert any("profile=mlx" in n for n in default.notes)


def test_mlx_has_no_amd_or_intel_gpu_backend():
    from vramwise.inputs.runs_on import check

    got = check("amd", "mlx", {})
    assert [r.thing for r in got.refusals] == ["mlx"] and got.refusals[0].alternatives == ("profile=hf",)
