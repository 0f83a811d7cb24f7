"""Each profile's test cases (formulas/<profile>/cases.yaml: figures derived by hand, as arithmetic,
with a tolerance) hold; ``vramwise check`` runs them, and reports a case that fails at its line."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

import vramwise
from vramwise.tooling.cases import read_cases, run_cases

FORMULAS = resources.files("vramwise.formulas")
WITH_CASES = sorted(p.name for p in FORMULAS.iterdir() if p.is_dir() and p.joinpath("cases.yaml").is_file())


def test_every_profile_estimated_from_a_config_has_cases():
    # size_only estimates from a size, not a config: its figures are checked by its family's examples
    assert WITH_CASES == ["hf", "litgpt", "mlx", "studio", "torchtune", "unsloth", "vllm"]


@pytest.mark.parametrize("profile", WITH_CASES)
def test_every_case_holds(profile):
    cases = read_cases(FORMULAS, "formulas", profile)
    assert len(cases.data["cases"]) >= 2
    assert run_cases(vramwise.Registry(), cases) == []


def test_check_runs_the_cases_and_locates_a_failed_one(tmp_path):
    folder = tmp_path / "vllm"
    shutil.copytree(Path(str(FORMULAS.joinpath("vllm"))), folder, ignore=shutil.ignore_patterns("__*"))
    p = folder / "cases.yaml"
    text = p.read_text(encoding="utf-8")
    p.write_text(text.replace("        block_size: 64\n", "        block_size: 32\n"), encoding="utf-8")
    line = text.splitlines().index("        block_size: 64") + 1
    problems = vramwise.check([folder])
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{p}:{line}:21: $.cases[1].expect.figures.block_size: case '0.34.0 defaults")
    assert problems[0].endswith("figure block_size is 64, expected 32 (within 1)")
