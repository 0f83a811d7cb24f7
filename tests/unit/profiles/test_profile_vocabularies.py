"""A profile declares the vocabularies of its stack's settings in its profile.yaml (``settings``); the
settings table, the command line's choices and the API's refusals read them from there, and a
declaration that does not match the profile's formulas is refused at its file:line:col."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

import vramwise
from vramwise import FileFormatError, SettingsError
from vramwise.profiles.settings import BLOCK_SIZES, DEFAULTS, KV_CACHE_DTYPES, SETTINGS, VLLM_VERSIONS, normalise_settings

FORMULAS = Path(str(resources.files("vramwise.formulas")))

# vllm/config/cache.py (0.34.0): CacheDType = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", ...]
# (the ones the profile models), BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]
VLLM_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


def test_the_settings_table_takes_vllm_s_vocabularies_from_the_profile():
    assert KV_CACHE_DTYPES == VLLM_CACHE_DTYPES
    assert BLOCK_SIZES == VLLM_BLOCK_SIZES
    assert VLLM_VERSIONS == ("0.8.0", "0.34.0") and DEFAULTS["vllm_version"] == "0.34.0"
    by_name = {s.name: s for s in SETTINGS}
    assert tuple(by_name["kv_cache_dtype"].choices) == VLLM_CACHE_DTYPES
    assert by_name["vllm_version"].help == "serving: the vLLM release whose rules apply (0.8.0 to 0.34.0)"


def test_the_command_line_and_the_refusals_list_the_declared_choices():
    from vramwise.surfaces.cli.parser import build_parser

    text = build_parser().subparser("estimate").format_help()
    assert "{auto,bfloat16,float16,fp8,fp8_e4m3,fp8_e5m2}" in text
    with pytest.raises(SettingsError, match=r"^unknown kv cache dtype 'int8' \(choose one of: auto, bfloat16, float16, "
                                            r"fp8, fp8_e4m3, fp8_e5m2\)$"):
        normalise_settings(method="inference", kv_cache_dtype="int8")
    with pytest.raises(SettingsError, match=r"^block_size must be one of 1, 8, 16, 32, 64, 128, 256 \(vLLM's block sizes\), got 7$"):
        normalise_settings(method="inference", block_size=7)
    with pytest.raises(SettingsError, match=r"^vllm_version 0\.7\.9: the serving profile has vLLM's rules from 0\.8\.0 to the 0\.34 releases"):
        normalise_settings(method="inference", vllm_version="0.7.9")
    assert normalise_settings(method="inference", vllm_version="0.34.7").vllm_version == "0.34.7"


def _vllm_copy(tmp_path: Path, file: str, old: str, new: str) -> tuple[Path, Path]:
    dst = tmp_path / "formulas"
    for folder in ("vllm", "shared"):
        shutil.copytree(FORMULAS / folder, dst / folder, ignore=shutil.ignore_patterns("__*"))
    p = dst / "vllm" / file
    text = p.read_text(encoding="utf-8")
    assert text.count(old) == 1
    p.write_text(text.replace(old, new), encoding="utf-8")
    return dst, p


def _line(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if needle in line)


def test_a_vocabulary_for_a_setting_the_formulas_do_not_read_is_refused(tmp_path):
    forms, p = _vllm_copy(tmp_path, "profile.yaml", "  block_size:\n    choices:", "  loss:\n    choices:")
    with pytest.raises(FileFormatError, match=rf"profile\.yaml:{_line(p, '  loss:')}:3: \$\.settings\.loss: "
                                              r"the profile's formulas do not read loss"):
        vramwise.Registry(formulas_dir=forms).profile("vllm")


def test_a_dated_value_must_reach_back_to_the_first_declared_release(tmp_path):
    forms, p = _vllm_copy(tmp_path, "kv_cache.yaml", '{"0.8.0": 1, "0.12.0": 1.25,', '{"0.9.0": 1, "0.12.0": 1.25,')
    with pytest.raises(FileFormatError, match=rf"kv_cache\.yaml:{_line(p, '  group_threshold:')}:3: \$\.dated\.group_threshold: "
                                              r"no value from 0\.8\.0, the first release of vllm_version"):
        vramwise.Registry(formulas_dir=forms).profile("vllm")


def test_a_dated_value_needs_the_releases_declared(tmp_path):
    forms, p = _vllm_copy(tmp_path, "profile.yaml", '    releases: {first: "0.8.0", last: "0.34.0"}',
                          '    choices: ["0.8.0"]')
    with pytest.raises(FileFormatError, match=r"\$\.dated\.\w+: dated by vllm_version, whose releases the profile vllm "
                                              r"does not declare"):
        vramwise.Registry(formulas_dir=forms).profile("vllm")
