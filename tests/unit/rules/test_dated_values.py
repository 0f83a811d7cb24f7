"""Values dated by release (formula files' ``dated:``): each value is in force from the release that keys
it until the next key; the estimate takes the one in force for its vllm_version, and a malformed or
unsorted release is refused at its file:line:col."""

from __future__ import annotations

import math
import shutil
from importlib import resources
from pathlib import Path

import pytest

import vramwise
from vramwise import FileFormatError, SettingsError

FORMULAS = Path(str(resources.files("vramwise.formulas")))
H100 = 85_029_615_043  # hardware/gpus.yaml cuda_total_bytes of the H100 SXM
LLAMA = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 8,
         "num_key_value_heads": 8, "num_hidden_layers": 4, "vocab_size": 32000, "max_position_embeddings": 4096}


def est(**settings):
    return vramwise.estimate(LLAMA, profile="vllm", method="inference", gpu_memory=H100, **settings)


def test_the_value_in_force_is_the_last_release_at_or_before_the_version():
    prof = vramwise.Registry().profile("vllm")
    threshold = next(d for d in prof.dated if d.name == "group_threshold")
    # vllm/v1/core/kv_cache_utils.py: 1 before 0.12, 1.25 at 0.14.1 (line 1036), 1.5 at 0.20.2 (line 1139), first at 0.19.0
    assert threshold.in_force("0.8.0") == ("0.8.0", 1)
    assert threshold.in_force("0.11.9") == ("0.8.0", 1)
    assert threshold.in_force("0.12.0") == ("0.12.0", 1.25)
    assert threshold.in_force("0.18.3") == ("0.12.0", 1.25)
    assert threshold.in_force("0.19.0") == ("0.19.0", 1.5)
    assert threshold.in_force("0.34.2") == ("0.19.0", 1.5)
    with pytest.raises(SettingsError, match=r"vllm_version 0\.7\.0: group_threshold has no value before 0\.8\.0 "
                                            r"\(.*kv_cache\.yaml:\d+:\d+\)"):
        threshold.in_force("0.7.0")


def test_the_estimate_reads_the_value_of_its_release():
    # vllm/config/cache.py: gpu_memory_utilization 0.9 up to 0.19, 0.92 from 0.20.0: requested = ceil(total x share)
    assert est(vllm_version="0.19.1").figures["requested"] == math.ceil(H100 * 0.9)  # 76,526,653,539
    assert est(vllm_version="0.20.0").figures["requested"] == math.ceil(H100 * 0.92)  # 78,227,245,840
    # the default block size: 16 up to 0.33, 64 from 0.34.0 (vllm/config/cache.py 0.34.0 line 185)
    assert est(vllm_version="0.33.0").figures["block_size"] == 16
    assert est(vllm_version="0.34.0").figures["block_size"] == 64


def test_a_dated_value_reads_its_release_setting_and_explain_shows_its_release():
    prof = vramwise.Registry().profile("vllm")
    assert "vllm_version" in prof.settings_read
    e = est(vllm_version="0.27.1")
    rows = {p.name: p for p in e.provenance}
    assert rows["default_utilization"].value == 0.92
    assert "vllm_version = '0.27.1' (the value from 0.20.0 on)" in str(rows["default_utilization"])


def test_no_formula_reads_a_version_code():
    with pytest.raises(SettingsError, match="unknown setting"):
        vramwise.estimate(LLAMA, profile="vllm", method="inference", gpu_memory=H100, vllm_version_code=3400)


def _vllm_copy(tmp_path: Path, old: str, new: str) -> tuple[Path, Path]:
    dst = tmp_path / "formulas"
    for folder in ("vllm", "shared"):
        shutil.copytree(FORMULAS / folder, dst / folder, ignore=shutil.ignore_patterns("__*"))
    p = dst / "vllm" / "kv_cache.yaml"
    text = p.read_text(encoding="utf-8")
    assert text.count(old) == 1
    p.write_text(text.replace(old, new), encoding="utf-8")
    return dst, p


def _line_col(path: Path, needle: str) -> tuple[int, int]:
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if needle in line:
            return i, line.index(needle) + 1
    raise AssertionError(needle)


def test_an_unsorted_release_is_refused_where_it_is_written(tmp_path):
    forms, p = _vllm_copy(tmp_path, '{"0.8.0": 1, "0.12.0": 1.25, "0.19.0": 1.5}', '{"0.8.0": 1, "0.19.0": 1.5, "0.12.0": 1.25}')
    line, col = _line_col(p, '"0.12.0"')
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(formulas_dir=forms).profile("vllm")
    assert f"kv_cache.yaml:{line}:{col}: $.dated.group_threshold.values.0.12.0: release 0.12.0 is not after 0.19.0" in str(info.value)


def test_a_malformed_release_is_refused_where_it_is_written(tmp_path):
    forms, p = _vllm_copy(tmp_path, '"0.12.0": 1.25', '"0.12": 1.25')
    line, col = _line_col(p, '"0.12"')
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(formulas_dir=forms).profile("vllm")
    assert f"kv_cache.yaml:{line}:{col}: " in str(info.value)
    assert "release '0.12' is not MAJOR.MINOR.PATCH" in str(info.value)


def test_values_dated_by_another_setting_are_refused(tmp_path):
    forms, p = _vllm_copy(tmp_path, "  group_threshold:\n    by: vllm_version", "  group_threshold:\n    by: method")
    line, _ = _line_col(p, "by: method")
    with pytest.raises(FileFormatError, match=rf"kv_cache\.yaml:{line}:\d+: \$\.dated\.group_threshold\.by: "
                                              r"'method' is not a release setting"):
        vramwise.Registry(formulas_dir=forms).profile("vllm")


def test_the_schema_refuses_a_dated_value_without_its_source(tmp_path):
    forms, p = _vllm_copy(tmp_path, "    source: vllm/v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size (0.14.1 line 1036, 0.20.2 line 1139)\n", "")
    with pytest.raises(FileFormatError, match=r"kv_cache\.yaml:\d+:\d+: \$\.dated\.group_threshold: 'source' is a required property"):
        vramwise.Registry(formulas_dir=forms, validate=True).profile("vllm")
