"""The scorer of the published GPU runs (benchmarks/gpu_runs.py): units, error arithmetic, which figure of the
estimate each statistic meets, the settings and GPU a run is estimated with, and runs it does not score.

The runs here are made by hand; expected numbers are derived in the comments. The page docs/gpu-runs.md shows
the scorer's output through a console block, which tests/unit/project/test_doc_outputs.py keeps current.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

import vramwise

from helpers import script_module

REPO = Path(__file__).resolve().parents[3]


def _scorer():
    return script_module("benchmarks/gpu_runs.py", "gpu_runs_scorer")


def _run(**changes) -> dict:
    run = {"id": "example", "framework": "hf", "model": "meta-llama/Llama-2-7b-hf",
           "gpu": {"name": "RTX 4090", "count": 1},
           "settings": {"stated": {"method": "lora", "batch_size": 1, "seq_len": 512}},
           "statistic": "torch_max_allocated", "value": 18.5, "unit": "GB", "notes": ""}
    run.update(changes)
    return run


# ---- units and arithmetic ---------------------------------------------------------------------------

@pytest.mark.parametrize("unit, notes, expected", [
    ("GiB", "", 2**30),
    ("MiB", "", 2**20),
    ("GB", "", 10**9),
    ("MB", "", 10**6),
    # a note that settles the question for binary units
    ("GB", "the log divides by 2**30, so GB is GiB here.", 2**30),
    ("MB", "'MB' read as MiB (the tool divides by 1024**2).", 2**20),
    # a note that only raises the question leaves the decimal reading
    ("GB", "It does not say whether GB is 10^9 bytes or GiB; the unit is kept as written.", 10**9),
    ("GB", "so GB is 10^9 bytes of torch's peak allocated memory.", 10**9),
])
def test_unit_bytes(unit, notes, expected):
    assert _scorer().unit_bytes(unit, notes) == expected


def test_published_bytes_convert_the_value():
    s = _scorer()
    # 18.5 GB = 18.5 x 10^9 = 18,500,000,000 bytes
    assert s.published_bytes(_run(value=18.5, unit="GB")) == 18_500_000_000
    # 1536 MiB = 1536 x 1,048,576 = 1,610,612,736 bytes
    assert s.published_bytes(_run(value=1536, unit="MiB")) == 1_610_612_736
    # 41 GB where the notes say GB is GiB: 41 x 1,073,741,824 = 44,023,414,784 bytes
    assert s.published_bytes(_run(value=41, unit="GB", notes="GB is GiB")) == 44_023_414_784
    with pytest.raises(s.NotScored, match="not a memory size"):
        s.published_bytes(_run(value=2048, unit="tokens"))


def test_signed_error_and_p90():
    s = _scorer()
    # 12e9 / 10e9 - 1 = 0.2; 9 / 10 - 1 = -0.1
    assert s.signed_error(12e9, 10e9) == pytest.approx(0.2)
    assert s.signed_error(9, 10) == pytest.approx(-0.1)
    # nearest rank: 10 values -> the ceil(0.9 x 10) = 9th smallest; 11 values -> the ceil(9.9) = 10th
    assert s.p90([10, 9, 8, 7, 6, 5, 4, 3, 2, 1]) == 9
    assert s.p90(list(range(1, 12))) == 10
    assert s.p90([0.4]) == 0.4


def test_summary_arithmetic():
    s = _scorer()
    memory = [s.Scored(f"m{i}", "hf", "hf", "lora", "torch_max_allocated", 10, 10 * (1 + e), "tensor_peak", e, None)
              for i, e in enumerate((0.1, -0.3, 0.2))]
    verdicts = [s.Scored(f"v{i}", "litgpt", "litgpt", "lora", "oom", False, f, "fit.fits", None, not f)
                for i, f in enumerate((False, False, False, True))]
    skipped = [s.Skipped("x", "other", "org/model", "framework 'other' has no profile")]
    summary = s.summarise(memory + verdicts + skipped)
    assert (summary["runs"], summary["scored"]) == (8, 7)
    (group,) = summary["memory"]
    # |errors| 0.1, 0.3, 0.2: median 0.2; p90 = the ceil(2.7) = 3rd smallest = 0.3; signed median of
    # -0.3, 0.1, 0.2 is 0.1
    assert group["runs"] == 3 and group["compared_with"] == "tensor_peak"
    assert group["median_abs_error"] == pytest.approx(0.2)
    assert group["p90_abs_error"] == pytest.approx(0.3)
    assert group["signed_median_error"] == pytest.approx(0.1)
    # three of the four runs ran out of memory where fit says they do not fit: 3 / 4 = 0.75
    (verdict,) = summary["verdicts"]
    assert (verdict["runs"], verdict["agree"], verdict["share_agree"]) == (4, 3, 0.75)
    assert summary["not_scored_reasons"] == {"framework 'other' has no profile": {"org/model": 1}}
    text = s.format_summary(summary)
    assert "  20.0%" in text and "  30.0%" in text and "+10.0%" in text and "75.0%" in text
    assert "org/model x1" in text


def test_pairs_of_a_tensor_peak_and_a_reading_above_it():
    s = _scorer()
    G = 2**30
    src = {"url": "https://example.org/bench", "quote": "q"}
    runs = [
        # one GPU: allocated 10 GiB and nvidia-smi 14 GiB of the same run; a second run of another batch
        _run(id="a1", source=src, statistic="torch_max_allocated"),
        _run(id="s1", source=src, statistic="nvidia_smi"),
        _run(id="a2", source=src, statistic="torch_max_allocated", gpu={"name": "RTX 4090", "count": 2}),
        _run(id="s2", source=src, statistic="nvidia_smi", gpu={"name": "RTX 4090", "count": 2}),
        # a reading whose tensor peak is from another source is not a pair
        _run(id="s3", source={**src, "url": "https://example.org/other"}, statistic="nvidia_smi"),
    ]
    scored = [s.Scored("a1", "hf", "hf", "lora", "torch_max_allocated", 10 * G, 11 * G, "tensor_peak", 0.1, None),
              s.Scored("s1", "hf", "hf", "lora", "nvidia_smi", 14 * G, 13 * G, "device", -1 / 14, None),
              s.Scored("a2", "hf", "hf", "lora", "torch_max_allocated", 5 * G, 5 * G, "tensor_peak", 0.0, None),
              s.Scored("s2", "hf", "hf", "lora", "nvidia_smi", 9 * G, 7 * G, "device", -2 / 9, None),
              s.Scored("s3", "hf", "hf", "lora", "nvidia_smi", 20 * G, 13 * G, "device", -0.35, None)]
    rows = s.pairs(runs, scored)
    # s1: published gap 14 - 10 = 4 GiB, estimated 13 - 11 = 2 GiB; s2: 9 - 5 = 4, 7 - 5 = 2
    assert [(r["id"], r["gpus"], r["published_gap"], r["estimated_gap"]) for r in rows] == [
        ("s1", 1, 4 * G, 2 * G), ("s2", 2, 4 * G, 2 * G)]
    one, several = s.summarise_pairs(rows)
    # one pair a group: the medians are the pair's own; 4 / 10 = 40 % of the peak on one GPU, 4 / 5 = 80 % on two
    assert (one["gpus"], one["pairs"], one["published_gap_gib"], one["estimated_gap_gib"]) == ("1", 1, 4, 2)
    assert one["published_gap_share"] == pytest.approx(0.4) and one["shortfall_gib"] == -2
    assert several["gpus"] == "2+" and several["published_gap_share"] == pytest.approx(0.8)
    text = s.format_summary({**s.summarise(scored), "pairs": [one, several]})
    assert "-2.00 [-2.00, -2.00]" in text and "Above the tensors" in text


# ---- what a run is estimated with ---------------------------------------------------------------------

def test_settings_of_a_run():
    s = _scorer()
    run = _run(framework="fsdp-qlora", gpu={"name": "RTX 3090", "count": 2},
               settings={"stated": {"method": "qlora"}, "from_defaults": {"optimizer": "adamw_torch"},
                         "defaults_source": "x"})
    # several GPUs and no stated strategy: fsdp over the GPU count; from_defaults kept
    assert s.run_settings(run) == ("hf", {"method": "qlora", "optimizer": "adamw_torch", "strategy": "fsdp",
                                          "world_size": 2})
    run["settings"]["stated"]["strategy"] = "ddp"
    assert s.run_settings(run)[1]["strategy"] == "ddp"
    # one GPU: nothing added
    assert s.run_settings(_run(framework="fsdp-qlora"))[1] == {"method": "lora", "batch_size": 1, "seq_len": 512}
    deepspeed = _run(framework="deepspeed")
    with pytest.raises(s.NotScored, match="without a stated ZeRO stage"):
        s.run_settings(deepspeed)
    deepspeed["settings"]["stated"].update(strategy="zero3", world_size=2)
    assert s.run_settings(deepspeed)[0] == "hf"
    with pytest.raises(s.NotScored, match="framework 'axolotl' has no profile"):
        s.run_settings(_run(framework="axolotl"))


def test_a_run_whose_settings_are_not_given_is_kept_and_not_scored():
    s = _scorer()
    run = _run(settings={"stated": {"method": "lora", "batch_size": 2, "seq_len": 2048},
                         "not_given": "the same table's row on another GPU publishes half this figure"})
    with pytest.raises(s.NotScored, match=r"does not give \(settings.not_given\)"):
        s.run_settings(run)
    skipped = s.score_run(run)
    assert isinstance(skipped, s.Skipped) and "settings.not_given" in skipped.reason


@pytest.mark.parametrize("versions, stated, layout", [
    ({"transformers": "4.48.1"}, {}, "per_expert"),  # 4.x: one nn.Linear per expert (MixtralSparseMoeBlock)
    ({"transformers": "5.24.0"}, {}, None),  # 5: fused experts, vramwise's default for the installed release
    ({}, {}, None),  # no version recorded: vramwise's default
    ({"transformers": "4.48.1"}, {"experts_layout": "fused"}, "fused"),  # a stated layout wins
])
def test_a_run_recorded_on_transformers_4_holds_its_experts_as_per_expert_linears(versions, stated, layout):
    s = _scorer()
    run = _run(versions=versions, settings={"stated": {"method": "qlora", **stated}})
    assert s.run_settings(run)[1].get("experts_layout") == layout


def test_gpu_of_a_run():
    s = _scorer()
    assert s.gpu_query(_run(gpu={"name": "RTX 4090", "count": 1})) == "RTX 4090"
    assert s.gpu_query(_run(gpu={"name": "some card", "memory_gib": 22.49, "count": 1})) == "22.49GiB"
    # one size in a name the catalog does not know: read as the catalog reads sizes, 24 x 10^9 bytes
    query = s.gpu_query(_run(gpu={"name": "A5000 24GB", "count": 2}))
    assert query == "24GB" and vramwise.gpu_spec(query).memory_bytes == 24 * 10**9
    with pytest.raises(s.NotScored, match="no single size"):
        s.gpu_query(_run(gpu={"name": "A100 80GB (48 GB VRAM column)", "count": 1}))
    with pytest.raises(s.NotScored, match="no GPU named"):
        s.gpu_query(_run(gpu=None))


# ---- scoring runs ---------------------------------------------------------------------------------------

def test_a_model_without_an_offline_config_is_not_scored(tmp_path):
    s = _scorer()
    result = s.score_run(_run(model="example-org/not-in-the-catalog"), shared=tmp_path)
    assert result == s.Skipped("example", "hf", "example-org/not-in-the-catalog", "no config offline")
    summary = s.summarise([result])
    assert summary["scored"] == 0 and summary["not_scored"][0]["reason"] == "no config offline"
    assert "example-org/not-in-the-catalog x1" in s.format_summary(summary)
    assert s.format_list([result]) == "example  not scored: no config offline"


def test_a_shared_config_is_read_when_the_catalog_lacks_the_model(tmp_path):
    s = _scorer()
    config = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    (tmp_path / "example-org__tiny.json").write_text(json.dumps(config), encoding="utf-8")
    assert s.find_config("example-org/tiny", tmp_path) == str(tmp_path / "example-org__tiny.json")
    # the catalog comes first, by the model's own id
    assert s.find_config("meta-llama/Llama-2-7b-hf", tmp_path) == "catalog:meta-llama/Llama-2-7b-hf"
    result = s.score_run(_run(model="example-org/tiny"), shared=tmp_path)
    expected = vramwise.estimate(config, profile="hf", method="lora", batch_size=1, seq_len=512).figures["tensor_peak"]
    assert result.estimated == expected
    assert result.error == pytest.approx(expected / 18.5e9 - 1)


@pytest.mark.parametrize("statistic, figure", [
    ("torch_max_allocated", "tensor_peak"), ("torch_peak_active", "tensor_peak"),
    ("torch_max_reserved", "reserved"), ("nvidia_smi", "device"), ("total_reported", "total"),
])
def test_each_statistic_meets_its_figure(statistic, figure):
    s = _scorer()
    result = s.score_run(_run(statistic=statistic, value=20, unit="GiB"))
    est = vramwise.estimate("catalog:meta-llama/Llama-2-7b-hf", profile="hf", method="lora", batch_size=1,
                            seq_len=512)
    expected = est.total if figure == "total" else est.figures[figure]
    assert (result.compared_with, result.estimated, result.published) == (figure, expected, 20 * 2**30)
    assert result.error == pytest.approx(expected / (20 * 2**30) - 1)


def test_a_profile_without_the_figure_is_compared_by_its_total():
    s = _scorer()
    # the studio profile (the estimator's arithmetic) has no tensor peak: its total stands in for it
    est = vramwise.estimate("catalog:meta-llama/Llama-2-7b-hf", profile="studio", method="qlora")
    assert "tensor_peak" not in est.figures
    assert s._memory_figure(est, "torch_max_allocated", 1) == (est.total, "total")
    # the unsloth profile counts its tensors, so a run of torch's allocated peak meets its tensor peak
    result = s.score_run(_run(framework="unsloth",
                              settings={"stated": {"method": "qlora", "batch_size": 2, "seq_len": 2048}}))
    assert result.profile == "unsloth" and result.compared_with == "tensor_peak"
    assert result.estimated == vramwise.estimate("catalog:meta-llama/Llama-2-7b-hf", method="qlora", batch_size=2,
                                                 seq_len=2048).figures["tensor_peak"]


def test_boundaries_and_verdicts_use_fit():
    s = _scorer()
    run = _run(statistic="largest_seq_len", value=4096, unit="tokens",
               settings={"stated": {"method": "qlora", "batch_size": 1}})
    result = s.score_run(run)
    # the scorer scores the memory model, with no headroom kept free (not the device band's default)
    fit = vramwise.fit("catalog:meta-llama/Llama-2-7b-hf", gpu="RTX 4090", headroom=0, profile="hf", method="qlora",
                       batch_size=1)
    assert fit.max_seq_len_memory > vramwise.fit("catalog:meta-llama/Llama-2-7b-hf", gpu="RTX 4090", profile="hf",
                                                 method="qlora", batch_size=1).max_seq_len_memory
    # a published largest length is a memory boundary: compared with what memory alone allows, not the capped figure
    assert (result.estimated, result.compared_with) == (fit.max_seq_len_memory, "fit.max_seq_len_memory")
    assert result.error == pytest.approx(fit.max_seq_len_memory / 4096 - 1)
    # Llama 2 70B in 4 bits: about 69e9 parameters x 0.5 byte = 34.5e9 bytes of weights alone, above an
    # 8 GB (8e9 bytes) GPU: an oom run agrees with fit, a fits run does not
    big = dict(model="meta-llama/Llama-2-70b-hf", gpu={"name": "8 GB", "count": 1}, unit="bool", value=True,
               settings={"stated": {"method": "qlora"}})
    oom = s.score_run(_run(statistic="oom", **big))
    fits = s.score_run(_run(statistic="fits", **big))
    assert (oom.published, oom.estimated, oom.agree) == (False, False, True)
    assert (fits.published, fits.estimated, fits.agree) == (True, False, False)


def test_a_refused_estimate_is_not_scored_with_its_reason():
    s = _scorer()
    # several GPUs stated without a strategy: vramwise refuses a world_size without one
    run = _run(framework="torchtune", gpu={"name": "A100", "count": 8},
               settings={"stated": {"method": "lora", "world_size": 8, "batch_size": 1, "seq_len": 512}})
    result = s.score_run(run)
    assert isinstance(result, s.Skipped)
    assert result.reason.startswith("refused: world_size 8 needs a multi-GPU strategy")


@pytest.mark.parametrize("stated, unstated", [
    ({"method": "lora", "batch_size": 1}, "seq_len"),
    ({"batch_size": 1, "seq_len": 512}, "method"),
    ({}, "method, batch_size, seq_len"),
])
def test_a_memory_figure_at_an_unstated_shape_is_not_scored(stated, unstated):
    s = _scorer()
    result = s.score_run(_run(settings={"stated": stated}))
    assert isinstance(result, s.Skipped)
    assert result.reason == f"a memory figure whose {unstated} the source does not state"
    # a framework default recorded for it (from_defaults, with its source) counts as stated
    given = {"method": "lora", "batch_size": 1, "seq_len": 512}
    defaults = {k: v for k, v in given.items() if k not in stated}
    scored = s.score_run(_run(settings={"stated": stated, "from_defaults": defaults, "defaults_source": "x.py:1"}))
    assert isinstance(scored, s.Scored)
    # a boundary or a verdict is still scored: fit answers it at the stated settings
    boundary = s.score_run(_run(statistic="fits", value=True, unit="bool", settings={"stated": stated}))
    assert isinstance(boundary, s.Scored)


@pytest.mark.parametrize("statistic, stated, unstated", [
    ("largest_seq_len", {"method": "qlora"}, "batch_size"),
    ("largest_seq_len", {"batch_size": 1}, "method"),
    ("largest_batch", {"method": "lora", "batch_size": 2}, "seq_len"),
])
def test_a_boundary_at_an_unstated_setting_is_not_scored(statistic, stated, unstated):
    # a largest sequence is measured at some batch and a largest batch at some length; at vramwise's default
    # in their place the comparison would test nothing, as for a memory figure
    s = _scorer()
    run = _run(statistic=statistic, value=4096, unit="tokens" if statistic == "largest_seq_len" else "sequences",
               gpu={"name": "24 GB", "count": 1}, settings={"stated": stated})
    result = s.score_run(run)
    assert isinstance(result, s.Skipped)
    assert result.reason == f"a boundary whose {unstated} the source does not state"
    held = {"method": "qlora", "batch_size": 1, "seq_len": 1024}
    full = {**held, **stated}
    full.pop("seq_len" if statistic == "largest_seq_len" else "batch_size")
    scored = s.score_run(_run(statistic=statistic, value=4096, unit=run["unit"], gpu=run["gpu"],
                              settings={"stated": full}))
    assert isinstance(scored, s.Scored) and scored.estimated is not None


def test_the_page_shows_the_scorer_output_through_a_console_block():
    # scripts/build_doc_outputs.py regenerates the block, and test_doc_outputs checks it is current
    spec = importlib.util.spec_from_file_location("build_doc_outputs_for_gpu_runs", REPO / "scripts" /
                                                  "build_doc_outputs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    page = REPO / "docs" / "gpu-runs.md"
    blocks = module.find_blocks(page, page.read_text(encoding="utf-8").split("\n"))
    # the scorer's output, and the allocator fit's written cells (benchmarks/allocator_fit.yaml) further down
    assert [c.text for b in blocks for c in b.commands] == ["python benchmarks/gpu_runs.py",
                                                            "python benchmarks/allocator_fit.py --show"]
    assert "gpu-runs.md" in (REPO / "mkdocs.yml").read_text(encoding="utf-8")
