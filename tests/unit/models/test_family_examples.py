"""Runs the ``examples:`` of every family file (hand-derived test vectors beside the rules), with the
runner ``vramwise check`` uses."""

from __future__ import annotations

import pytest

import vramwise
from vramwise.tooling.examples import expected_value, run_example

_REG = vramwise.Registry.default()
# (family, index, name) of every example, from the files' own `examples:` entries (Registry.family_entries: the
# compiled families' examples, read without compiling every family at collection)
_CASES = [(name, i, ex["name"]) for name in _REG.family_names()
          for i, ex in enumerate(_REG.family_entries(name, "examples").get("examples") or ())]


def test_every_family_has_examples():
    missing = [f.name for f in _REG.families.values() if not f.examples]
    assert not missing


@pytest.mark.parametrize("family,index", [(f, i) for f, i, _ in _CASES], ids=[f"{f}:{name}" for f, _, name in _CASES])
def test_example(family, index):
    example = _REG.family(family).examples[index]
    assert "expect" in example
    assert run_example(_REG, family, example) == []


def test_a_failed_expectation_is_a_problem():
    example = dict(_REG.family("llama").examples[0])
    expect = dict(example["expect"])
    expect["facts"] = dict(expect.get("facts") or {}, num_hidden_layers=-1)
    (problem,) = run_example(_REG, "llama", dict(example, expect=expect))
    assert "fact num_hidden_layers is" in problem and "expected -1" in problem


@pytest.mark.parametrize("text,value", [
    ("2 * 4096 * 128256", 1_050_673_152),  # 2 x 4096 = 8192; 8192 x 128256 = 1,050,673,152
    ("(3 + 4) * 2 ** 10 // 7", 1024),
    ("1 / 4", 0.25),
    (12, 12),
])
def test_expected_values_are_arithmetic(text, value):
    assert expected_value(text) == value


@pytest.mark.parametrize("text", ["hidden_size * 2", "2 ** 99999999", "open('x')", "1 / 0"])
def test_expected_values_reject_names_calls_and_failures(text):
    with pytest.raises(vramwise.VramwiseError):
        expected_value(text)
