"""Error bands (accuracy/bands.yaml, vramwise.profiles.bands): the file holds every cell key of the validation
matrices with its count, as scripts/build_accuracy_bands.py writes it; each estimate carries the band of
its profile x method x strategy, or says why it has none; the command line and the server show it.

The measured figures themselves come from measuring the matrices (``python scripts/build_accuracy_bands.py``,
about as long as tests/measured/test_validation_matrix*.py); these tests need no measuring."""

from __future__ import annotations

import importlib.util
import json
import shutil
from importlib import resources
from pathlib import Path

import pytest

import vramwise
from vramwise.profiles.bands import BANDS_PATH, ErrorBand, bundled_bands, read_bands
from vramwise.errors import FileFormatError
from vramwise.surfaces.cli.main import main

from validation_matrices import MATRICES

ROOT = Path(__file__).resolve().parents[3]
SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


def _script():
    spec = importlib.util.spec_from_file_location("build_accuracy_bands", ROOT / "scripts" / "build_accuracy_bands.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _flat(text: str) -> str:
    return " ".join(text.split())


# -- the bundled file ------------------------------------------------------------------------------

def test_bands_file_holds_every_cell_key_of_the_matrices_with_its_count():
    problems = _script().check()
    assert problems == [], ("accuracy/bands.yaml is out of date with benchmarks/validation_matrices.py: "
                            "python scripts/build_accuracy_bands.py [--matrix NAME]\n" + "\n".join(problems))


def test_bands_file_is_the_scripts_rendering_and_valid_under_its_schema():
    from jsonschema import Draft202012Validator

    from vramwise.rules.datafiles import load_schema

    Draft202012Validator.check_schema(load_schema("accuracy-1.schema.json"))
    text = resources.files("vramwise.accuracy").joinpath("bands.yaml").read_text(encoding="utf-8")
    table = read_bands(text, BANDS_PATH, validate=True)
    script = _script()
    assert text == script.render(script.read_entries()), "edited by hand? python scripts/build_accuracy_bands.py"
    # every cell of every matrix is in one band: the cells of the bands add up to the matrices'
    matrices = script.all_matrices()
    assert sum(b.cells for b in table.bands()) == sum(len(list(m.cells())) for m in matrices.values())
    for b in table.bands():
        assert 0 <= b.median_abs_error <= b.max_abs_error and b.generated and set(b.matrices) <= set(matrices)


def test_accuracy_folder_is_packaged():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert config["package-dir"]["vramwise.accuracy"] == "accuracy"
    assert "vramwise.accuracy" in config["packages"] and config["package-data"]["vramwise.accuracy"] == ["*.yaml"]


def test_bundled_bands_are_read_once_and_can_be_forgotten():
    first = bundled_bands()
    assert bundled_bands() is first
    bundled_bands.cache_clear()
    assert bundled_bands() is not first


# -- reading and looking up, on a hand-written file ------------------------------------------------

FILE = """\
schema_version: 1
bands:
  - profile: hf
    method: lora
    strategy: none
    cells: 40
    median_abs_error: 0.000231
    max_abs_error: 0.0063
    world_sizes: [1]
    matrices: [hf]
    generated: '2026-12-05'
    commit: '0a0cc15'
  - profile: hf
    method: full
    strategy: fsdp
    cells: 7
    median_abs_error: 0.0046
    max_abs_error: 0.0441
    world_sizes: [2, 4]
    matrices: [strategies]
    generated: '2026-12-05'
    commit: '0a0cc15+changes'
unmeasured:
  - profile: unsloth
    reason: it reproduces the reference estimator
  - method: inference
    reason: the matrices measure training steps only
"""


def test_a_measured_band_and_its_line():
    t = read_bands(FILE, "x.yaml")
    b = t.band("hf", "lora")
    assert b == t.band("hf", "lora", None) == t.band("hf", "lora", "none")
    assert (b.measured, b.cells, b.median_abs_error, b.max_abs_error) == (True, 40, 0.000231, 0.0063)
    # 0.000231 -> 0.0231 % -> "0.02 %"; 0.0063 -> "0.63 %"
    assert b.line() == "tensors: median |error| 0.02 %, largest 0.63 % over 40 CPU-measured cells (hf, lora, one GPU)"
    f = t.band("hf", "full", "fsdp")
    assert f.line() == ("tensors: median |error| 0.46 %, largest 4.41 % over 7 CPU-measured cells "
                        "(hf, full, fsdp on 2 and 4 GPUs)")
    d = f.to_dict()
    assert json.loads(json.dumps(d)) == d and d["summary"] == f.line() and d["world_sizes"] == [2, 4]
    assert (d["commit"], d["reason"], d["matrices"]) == ("0a0cc15+changes", None, ["strategies"])


@pytest.mark.parametrize("key, why", [
    (("unsloth", "qlora", "none"), "it reproduces the reference estimator"),
    (("unsloth", "full", "ddp"), "it reproduces the reference estimator"),
    (("hf", "inference", "none"), "the matrices measure training steps only"),
    (("unsloth", "inference", "none"), "the matrices measure training steps only"),  # the method's reason first
    (("torchtune", "full", "fsdp"), "fsdp is measured on hf only"),  # a strategy measured for hf, not for torchtune
    (("hf", "lora", "fsdp"), "no validation matrix has this cell"),  # fsdp is measured on hf, but not with lora
    (("hf", "full", "zero3"), "no validation matrix runs zero3"),
    (("litgpt", "lora", "none"), "no validation matrix has this cell"),
])
def test_what_is_not_measured_says_why(key, why):
    b = read_bands(FILE, "x.yaml").band(*key)
    assert not b.measured and (b.cells, b.median_abs_error, b.max_abs_error) == (0, None, None)
    where = "one GPU" if key[2] == "none" else key[2]
    assert b.line() == f"tensors: not measured ({key[0]}, {key[1]}, {where}): {why}"
    assert b.to_dict()["reason"] == why and b.to_dict()["summary"] == b.line()


def test_lora_on_a_4bit_base_is_looked_up_as_qlora():
    t = read_bands(FILE.replace("method: lora", "method: qlora"), "x.yaml")
    assert t.band("hf", "lora", load_in_4bit=True) == t.band("hf", "qlora")
    assert t.band("hf", "lora", load_in_4bit=True).measured and not t.band("hf", "lora").measured


COMPILED_ENTRY = """\
  - profile: hf
    method: lora
    strategy: none
    compile: true
    cells: 4
    median_abs_error: 0.003
    max_abs_error: 0.012
    world_sizes: [1]
    matrices: [compile]
    generated: '2026-12-05'
    commit: '0a0cc15'
"""
COMPILED = FILE.replace("unmeasured:\n", COMPILED_ENTRY + "unmeasured:\n")


def test_compiled_steps_have_bands_of_their_own():
    t = read_bands(COMPILED, "x.yaml")
    eager, compiled = t.band("hf", "lora"), t.band("hf", "lora", compile=True)
    assert (eager.cells, eager.compile) == (40, False)
    assert (compiled.cells, compiled.compile, compiled.matrices) == (4, True, ("compile",))
    # 0.003 -> "0.30 %"; 0.012 -> "1.20 %"
    assert compiled.line() == ("tensors: median |error| 0.30 %, largest 1.20 % over 4 CPU-measured cells "
                               "(hf, lora, one GPU, compiled)")
    assert compiled.to_dict()["compile"] is True and eager.to_dict()["compile"] is False
    missing = t.band("hf", "full", compile=True)
    assert not missing.measured and missing.reason == "no validation matrix has this cell"
    assert read_bands(FILE, "x.yaml").band("hf", "lora", compile=True).reason == (
        "no validation matrix compiles the hf profile's step")
    with pytest.raises(FileFormatError, match="hf/lora/none/compiled is given twice"):
        read_bands(COMPILED.replace("unmeasured:\n", COMPILED_ENTRY + "unmeasured:\n"), "x.yaml")


def _line_of(text: str, needle: str, nth: int = 0) -> int:
    return [k for k, line in enumerate(text.splitlines(), 1) if needle in line][nth]


@pytest.mark.parametrize("change, message", [
    # the second entry names the first's key: reported at the second entry's first key (column 5, after "  - ")
    (lambda t: t.replace("method: full", "method: lora").replace("strategy: fsdp", "strategy: none"),
     lambda t: f"x.yaml:{_line_of(t, '- profile: hf', 1)}:5: $.bands[1]: hf/lora/none is given twice"),
    (lambda t: t.replace("    cells: 7\n", "    cells: 7\n    note: typed in\n"),
     lambda t: f"x.yaml:{_line_of(t, 'note:')}:5: $.bands[1].note: unknown key 'note'"),
    (lambda t: t.replace("max_abs_error: 0.0441", "max_abs_error: 0.004"),
     lambda t: f"x.yaml:{_line_of(t, 'max_abs_error: 0.004')}:20: $.bands[1].max_abs_error: below the median"),
    (lambda t: t.replace("  - profile: hf\n    method: full", "  - profile: unsloth\n    method: full"),
     lambda t: f"x.yaml:{_line_of(t, '- profile: unsloth')}:14: $.bands[1].profile: profile 'unsloth' is listed as unmeasured"),
    (lambda t: t.replace("cells: 7", "cells: 0"),
     lambda t: f"x.yaml:{_line_of(t, 'cells: 0')}:12: $.bands[1].cells: 0 is less than the minimum of 1"),
])
def test_file_problems_name_file_line_and_column(change, message):
    text = change(FILE)
    with pytest.raises(FileFormatError) as e:
        read_bands(text, "x.yaml")
    (problem,) = e.value.problems
    assert problem.startswith(message(text)), problem


# -- estimates carry their band ----------------------------------------------------------------------

def test_an_estimate_carries_its_cells_band():
    e = vramwise.estimate(SMALL, profile="hf", method="lora")
    b = e.error_band.tensors
    assert isinstance(b, ErrorBand) and b == bundled_bands().band("hf", "lora", "none")
    assert b.measured and b.cells > 0 and b.world_sizes == (1,) and "hf" in b.matrices  # the hf matrix measures it
    assert e.to_dict()["error_band"]["tensors"] == b.to_dict()
    assert "ErrorBand" in vramwise.__all__ and vramwise.ErrorBand is ErrorBand


def test_a_strategy_estimate_carries_the_strategys_band():
    # one world size the matrices never ran: the band of the strategy, whatever the world size
    e = vramwise.estimate(SMALL, profile="hf", method="full", strategy="fsdp", world_size=7)
    b = e.error_band.tensors
    assert b == bundled_bands().band("hf", "full", "fsdp") and b.measured and b.strategy == "fsdp"
    assert 7 not in b.world_sizes and min(b.world_sizes) >= 2 and "strategies" in b.matrices
    assert e.to_dict()["error_band"]["tensors"]["strategy"] == "fsdp"


def test_estimates_nobody_measured_say_so():
    # unsloth, the default: no CPU matrix runs its kernels
    assert vramwise.estimate(SMALL).error_band.tensors.reason.startswith("Unsloth's kernels run on CUDA GPUs only")
    inference = vramwise.estimate(SMALL, method="inference").error_band.tensors
    assert inference.reason.startswith("the validation matrices measure training steps only") and inference.strategy == "none"
    assert "docs/serving.md#accuracy" in inference.reason  # where the serving profile's figures are checked instead
    size_only = vramwise.estimate_from_size(params=8e9).error_band.tensors
    assert (size_only.profile, size_only.measured) == ("size_only", False)
    q = vramwise.estimate(SMALL, profile="hf", method="lora", load_in_4bit=True).error_band.tensors
    assert q == bundled_bands().band("hf", "qlora") and q.measured


def test_a_profile_from_another_formulas_folder_is_not_measured(tmp_path):
    forms = tmp_path / "formulas"
    shutil.copytree(resources.files("vramwise.formulas"), forms, ignore=shutil.ignore_patterns("__*"))
    reg = vramwise.Registry(formulas_dir=forms)
    b = vramwise.estimate(SMALL, profile="hf", method="lora", registry=reg).error_band.tensors
    assert not b.measured and b.reason == f"the profile is read from {forms / 'hf' / 'profile.yaml'}, not the bundled formulas"


# -- the command line and the server --------------------------------------------------------------

@pytest.fixture()
def cfg(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(SMALL))
    return str(p)


@pytest.mark.parametrize("argv, settings", [
    (["estimate", "--profile", "hf", "--method", "lora"], dict(profile="hf", method="lora")),
    (["estimate", "--profile", "hf", "--method", "full", "--strategy", "fsdp", "--world-size", "4"],
     dict(profile="hf", method="full", strategy="fsdp", world_size=4)),
    (["estimate", "--method", "inference"], dict(method="inference")),
    (["explain", "--profile", "hf", "--method", "qlora"], dict(profile="hf", method="qlora")),
    (["fit", "--profile", "hf", "--method", "lora", "--gpu", "RTX 4090"], dict(profile="hf", method="lora")),
    (["estimate"], {}),
])
def test_the_command_line_shows_the_band_in_one_line(cfg, capsys, argv, settings):
    assert main([argv[0], cfg, *argv[1:]]) == 0
    out = capsys.readouterr().out
    tensors, device = vramwise.estimate(SMALL, **settings).error_band.lines()
    assert _flat(tensors) in _flat(out) and _flat(device) in _flat(out)
    assert tensors.startswith(("tensors: median |error| ", "tensors: not measured ("))
    assert device.startswith(("device total: median |error| ", "device total: no published GPU run covers ("))


def test_the_server_answers_and_shows_the_band():
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    from vramwise.surfaces import serve

    model = "meta-llama/Llama-3.1-8B"  # a catalog entry: no hub
    with TestClient(serve.create_app(), base_url="http://127.0.0.1:8000") as client:
        got = client.post("/api/estimate", json={"model": model, "profile": "hf", "method": "lora"}).json()
        assert got["error_band"] == vramwise.estimate(model, profile="hf", method="lora").error_band.to_dict()
        page, script = client.get("/").text, client.get("/static/app.js").text
    assert 'id="band-tensors"' in page and 'id="band-device"' in page
    assert "est.error_band.tensors.summary" in script and "est.error_band.device.summary" in script


# -- the generator, on rows given by hand (nothing measured) ------------------------------------------

def test_the_generator_pools_a_key_and_measures_pooled_matrices_together():
    script = _script()
    hf = MATRICES["hf"]
    lora = [c for c in hf.cells() if hf.settings(c)["method"] == "lora"][:3]
    rows = {hf: [(c, {"error": e}) for c, e in zip(lora, (0.01, -0.03, 0.02))]}
    (entry,) = script.entries_from_rows(rows, "2026-12-05", "0a0cc15")
    # |errors| 0.01, 0.03, 0.02: median 0.02, largest 0.03, one GPU
    assert entry == {"profile": "hf", "method": "lora", "strategy": "none", "cells": 3, "median_abs_error": 0.02,
                     "max_abs_error": 0.03, "world_sizes": [1], "matrices": ["hf"], "generated": "2026-12-05",
                     "commit": "0a0cc15"}
    # the file's text reads back as the same band
    band = read_bands(script.render([entry]), "x.yaml").band("hf", "lora")
    assert (band.cells, band.median_abs_error, band.max_abs_error) == (3, 0.02, 0.03)
    # measuring another matrix keeps this one's band; measuring a key this band holds without hf stops
    other = dict(entry, profile="litgpt", matrices=["litgpt"])
    assert script.merge([entry], [other], {"litgpt"}) == [entry, other]
    with pytest.raises(SystemExit, match="measure them together"):
        script.merge([entry], [dict(entry, matrices=["qlora_prepare"])], {"qlora_prepare"})


def test_a_compiled_step_the_profile_does_not_model_has_no_band():
    # the hf profile models compile without checkpointing only; with it the figure is the eager run's
    e = vramwise.estimate(SMALL, profile="hf", method="lora", compile=True, gradient_checkpointing="true",
                          attention="sdpa")
    b = e.error_band.tensors
    assert not b.measured and b.compile
    assert b.reason.startswith("torch.compile is not modelled for these settings")
    assert any(w.startswith("compile: torch.compile with gradient checkpointing is not modelled") for w in e.warnings)
    # a profile that does not model compile at all keeps its eager band (its own warning says compile is ignored)
    t = vramwise.estimate(SMALL, profile="litgpt", method="lora", compile=True)
    assert t.error_band == vramwise.estimate(SMALL, profile="litgpt", method="lora").error_band
