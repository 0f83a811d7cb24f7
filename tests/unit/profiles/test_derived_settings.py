"""Settings left unset take their value from a rule of formulas/settings.yaml (``derive:``), an
expression of the other settings evaluated by the sandboxed expression language; a broken rule is
refused at its file:line:col, by the loader and by ``vramwise check``."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

import vramwise
from vramwise import ExpressionError, FileFormatError
from vramwise.profiles.settings import compile_derive_rules, normalise_settings
from vramwise.rules.datafiles import load_data_file

RULES = Path(str(resources.files("vramwise.formulas"))) / "settings.yaml"


@pytest.mark.parametrize("strategy, expected", [
    # PEFT's FSDP-QLoRA guide (docs/source/accelerate/fsdp.md) loads with bnb_4bit_quant_storage and does not
    # call prepare_model_for_kbit_training; every other QLoRA run calls it (one GPU, DDP, DeepSpeed ZeRO)
    ("none", True), ("ddp", True), ("zero2", True), ("zero3", True), ("device_map", True),
    ("fsdp", False), ("fsdp_shard_grad_op", False), ("fsdp_hybrid", False),
])
def test_qlora_prepares_for_kbit_training_except_under_fsdp(strategy, expected):
    multi = {} if strategy == "none" else {"world_size": 2}
    assert normalise_settings(method="qlora", strategy=strategy, **multi).kbit_prepare is expected


def test_a_given_value_wins_and_other_methods_have_no_kbit_preparation():
    assert normalise_settings(method="qlora", strategy="fsdp", world_size=2, kbit_prepare=True).kbit_prepare is True
    assert normalise_settings(method="qlora", kbit_prepare=False).kbit_prepare is False
    for method in ("lora", "full", "inference"):
        assert normalise_settings(method=method).kbit_prepare is None


def test_4bit_loading_follows_the_method():
    # QLoRA loads the base model in 4 bit; LoRA, full fine-tuning and inference in 16 bit
    assert [normalise_settings(method=m).load_in_4bit for m in ("qlora", "lora", "full", "inference")] == [True, False, False, False]
    assert normalise_settings(method="inference", load_in_4bit=True).load_in_4bit is True


def _rules(tmp_path: Path, old: str, new: str) -> Path:
    text = RULES.read_text(encoding="utf-8")
    assert text.count(old) == 1
    p = tmp_path / "settings.yaml"
    p.write_text(text.replace(old, new), encoding="utf-8")
    return p


def _line(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if needle in line)


def test_a_rule_reading_an_unknown_name_is_refused_where_it_is_written(tmp_path):
    p = _rules(tmp_path, "expr: method == \"qlora\"", "expr: method == \"qlora\" and nosuchsetting")
    line = _line(p, "nosuchsetting")
    with pytest.raises(ExpressionError, match=rf"settings\.yaml:{line}:\d+: \$\.derive\.load_in_4bit\.expr: .*nosuchsetting"):
        compile_derive_rules(load_data_file(p.read_text(encoding="utf-8"), str(p), "settings-1.schema.json"))
    problems = vramwise.check([p])
    assert len(problems) == 1 and problems[0].startswith(f"{p}:{line}:") and "nosuchsetting" in problems[0]


def test_a_rule_for_an_unknown_setting_is_refused(tmp_path):
    p = _rules(tmp_path, "  kbit_prepare:\n", "  kbit_prepared:\n")
    with pytest.raises(FileFormatError, match=rf"settings\.yaml:{_line(p, 'kbit_prepared:')}:3: \$\.derive\.kbit_prepared: "
                                              r"unknown setting 'kbit_prepared'"):
        compile_derive_rules(load_data_file(p.read_text(encoding="utf-8"), str(p), "settings-1.schema.json"))


def test_the_bundled_rules_are_fine():
    assert vramwise.check([RULES]) == []
