"""accuracy/device_bands.yaml, the device bands fit's default headroom comes from: written by
``python benchmarks/gpu_runs.py --device-bands`` from the corpus of published GPU runs scored against the
estimates, and current (this test fails when the corpus, the scorer or the engine changed without the file being
written again).

The arithmetic is checked on scored runs made by hand; the expected figures are derived in the comments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import SHARED_MISSING, script_module, shared_present
from vramwise.profiles.bands import DEVICE_BANDS_PATH, read_device_bands

REPO = Path(__file__).resolve().parents[3]
FILE = REPO / DEVICE_BANDS_PATH


def _scorer():
    return script_module("benchmarks/gpu_runs.py", "gpu_runs_scorer")


def _scored(s, error, statistic="total_reported", framework="hf", profile="hf", method="lora"):
    # published 100 bytes, estimated 100 x (1 + error): the scorer's error is estimated / published - 1
    return s.Scored(f"run-{error}-{statistic}", framework, profile, method, statistic, 100, round(100 * (1 + error)),
                    "total", error, None)


def test_the_bands_pool_device_totals_by_profile_and_method():
    s = _scorer()
    rows = [_scored(s, 0.1), _scored(s, -0.2, "nvidia_smi"), _scored(s, 0.05, "torch_max_reserved", "fsdp-qlora"),
            _scored(s, -0.3),
            # not device totals: a tensor peak and a boundary are left out of the band
            _scored(s, -0.9, "torch_max_allocated"), _scored(s, 5.0, "largest_seq_len"),
            _scored(s, 0.2, method="full"),
            s.Skipped("x", "hf", "some/model", "no config offline")]
    full, lora = s.device_bands(rows)  # in (profile, method) order
    # |errors| 0.1, 0.2, 0.05, 0.3: median (0.1 + 0.2) / 2 = 0.15; p90 by nearest rank: the ceil(0.9 x 4) = 4th
    # smallest, 0.3. Signed, sorted -0.3, -0.2, 0.05, 0.1: median (-0.2 + 0.05) / 2 = -0.075. Shortfalls
    # max(0, -error): 0, 0.2, 0, 0.3 -> sorted 0, 0, 0.2, 0.3, the 4th 0.3.
    assert lora == {"profile": "hf", "method": "lora", "runs": 4, "median_abs_error": 0.15, "p90_abs_error": 0.3,
                    "signed_median": -0.075, "p90_shortfall": 0.3, "frameworks": {"hf": 3, "fsdp-qlora": 1},
                    "statistics": {"total_reported": 2, "nvidia_smi": 1, "torch_max_reserved": 1}}
    # one run over-estimated by 20 %: nothing fell short, the shortfall is 0
    assert (full["runs"], full["p90_abs_error"], full["signed_median"], full["p90_shortfall"]) == (1, 0.2, 0.2, 0.0)
    table = read_device_bands(s.render_device_bands([full, lora]), "x.yaml")  # the text reads back, validated
    band = table.band("hf", "lora")
    assert (band.runs, band.median_abs_error, band.p90_abs_error, band.p90_shortfall) == (4, 0.15, 0.3, 0.3)
    assert band.frameworks == (("hf", 3), ("fsdp-qlora", 1))
    assert read_device_bands(s.render_device_bands([]), "x.yaml").bands() == ()


def test_a_framework_counts_for_the_other_profiles_that_estimate_its_stack():
    # an Unsloth run of a device total is scored again with studio, the reference estimator's answer for
    # Unsloth's stack; a tensor peak is not (device bands only), nor a run of another framework
    s = _scorer()
    assert s.ALSO_ESTIMATED_BY == {"unsloth": ("studio",)}
    model = "meta-llama/Llama-2-7b-hf"  # in the offline catalog
    runs = [dict(id=f"r{k}", framework=fw, model=model, gpu={"name": "RTX 4090", "count": 1},
                 settings={"stated": {"method": "qlora", "batch_size": 1, "seq_len": 512}}, statistic=stat,
                 value=10, unit="GiB", notes="")
            for k, (fw, stat) in enumerate([("unsloth", "total_reported"), ("unsloth", "torch_max_allocated"),
                                            ("hf", "nvidia_smi")])]
    got = s.device_band_results(runs, ["given"])
    assert got[0] == "given" and len(got) == 2
    (studio,) = got[1:]
    assert (studio.id, studio.profile, studio.framework) == ("r0", "studio", "unsloth")
    import vramwise

    want = vramwise.estimate(f"catalog:{model}", profile="studio", method="qlora", batch_size=1, seq_len=512).total
    assert studio.estimated == want and studio.published == 10 * 2**30


def test_the_bundled_file_is_valid():
    table = read_device_bands(FILE.read_text(encoding="utf-8"), DEVICE_BANDS_PATH)
    assert table.statistics == ("torch_max_reserved", "nvidia_smi", "total_reported")
    for band in table.bands():
        assert band.p90_abs_error >= band.median_abs_error and 0 <= band.p90_shortfall < 1


@pytest.mark.skipif(not shared_present(), reason=SHARED_MISSING)  # the corpus's configs come from ../shared too
def test_the_bundled_file_is_current():
    s = _scorer()
    runs = s.load_runs()
    text = s.render_device_bands(s.device_bands(s.device_band_results(runs, s.score_runs(runs))))
    assert FILE.read_text(encoding="utf-8") == text, (
        f"{DEVICE_BANDS_PATH} is stale: run python benchmarks/gpu_runs.py --device-bands")
