"""Runs the ``examples:`` of every family file (hand-derived test vectors beside the rules)."""

from __future__ import annotations

import pytest
from simpleeval import simple_eval

import vramwise

_REG = vramwise.Registry.default()
_CASES = [(f.name, ex) for f in _REG.families.values() for ex in f.examples]


def _value(v):
    """Expected values may be written as plain arithmetic (no names)."""
    return simple_eval(v, functions={}, names={}) if isinstance(v, str) else v


def test_every_family_has_examples():
    missing = [f.name for f in _REG.families.values() if not f.examples]
    assert not missing


@pytest.mark.parametrize("family,example", _CASES, ids=[f"{f}:{ex['name']}" for f, ex in _CASES])
def test_example(family, example):
    fam = _REG.family(family)
    if fam.model_types or fam.fallback or fam.abstract:
        spec = vramwise.load_model(example["config"], registry=_REG)  # chosen by model type, as users meet it
    else:  # a family no model type selects (size_only) is asked for by name
        spec = _REG.resolve(example["config"], family=family)
    expect = example["expect"]
    assert spec.family == expect.get("family", family)
    for name, value in expect.get("facts", {}).items():
        assert spec.facts[name] == value, name
    for group, value in expect.get("params", {}).items():
        got = spec.params_total if group == "total" else spec.params_by_group.get(group, 0)
        assert got == _value(value), group
    for attr, by_value in expect.get("layers", {}).items():
        got: dict = {}
        for lc in spec.layer_classes:
            got.setdefault(lc.attributes[attr], []).extend(lc.indices)
        assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in by_value.items()}, attr
    if "estimate" in expect:
        est = vramwise.estimate(spec, registry=_REG, **example.get("settings", {}))
        for fieldname, value in expect["estimate"].items():
            assert getattr(est, fieldname) == _value(value), fieldname
