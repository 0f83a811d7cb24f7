"""The formulas an estimate's figures come from: only the branch a condition takes is followed."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

import vramwise
from vramwise.estimation.explain import live_formula_ids
from vramwise.rules.expr.language import compile_expression

_NAMES = {"a", "b", "c", "d", "flag", "n"}


def _expr(text: str):
    return compile_expression(text, allowed=_NAMES)


def test_names_read_follow_the_branch_taken():
    e = _expr("a if flag else b")
    assert e.names_read({"a": 1, "b": 2, "flag": True}) == {"flag", "a"}
    assert e.names_read({"a": 1, "b": 2, "flag": False}) == {"flag", "b"}


def test_names_read_nested_and_inside_calls():
    e = _expr("max(a if n > 2 else b, c if n > 5 else d)")
    # n = 3: the first condition holds, the second does not
    assert e.names_read({"a": 1, "b": 2, "c": 3, "d": 4, "n": 3}) == {"n", "a", "d"}


def test_names_read_keep_both_branches_when_the_condition_cannot_be_decided():
    e = _expr("a if c / d > 1 else b")
    assert e.names_read({"a": 1, "b": 2, "c": 1, "d": 0}) == {"a", "b", "c", "d"}  # division by zero
    assert e.names_read({"a": 1, "b": 2}) == {"a", "b", "c", "d"}  # c and d unknown


def test_names_read_use_the_guards_of_the_language():
    e = _expr("a if n ** n > 1 else b")  # a power beyond the guard's limit is not computed
    assert e.names_read({"a": 1, "b": 2, "n": 10**7}) == {"a", "b", "n"}


def test_names_read_without_conditions_and_of_a_literal():
    assert _expr("a + b * min(c, 2)").names_read({}) == {"a", "b", "c"}
    assert compile_expression(7, allowed=_NAMES).names_read({}) == frozenset()


def _registry(tmp_path: Path) -> vramwise.Registry:
    """The bundled data with the size_only profile's gradient formula reading one of two formulas,
    ``lora_gradient_part`` for LoRA and ``full_gradient_part`` otherwise (both 0 bytes)."""
    formulas = tmp_path / "formulas"
    shutil.copytree(Path(str(resources.files("vramwise.formulas"))), formulas)
    path = formulas / "size_only" / "size.yaml"
    text = path.read_text()
    old = "  - id: gradient_bytes\n    expr: 0\n"
    assert old in text
    new = (
        "  - id: lora_gradient_part\n    expr: 0 * model_bytes\n    unit: bytes\n"
        "    description: Zero for LoRA.\n    source: a test\n"
        "  - id: full_gradient_part\n    expr: 0 * weights_bytes\n    unit: bytes\n"
        "    description: Zero otherwise.\n    source: a test\n"
        "  - id: gradient_bytes\n    expr: 'lora_gradient_part if method == \"lora\" else full_gradient_part'\n"
    )
    path.write_text(text.replace(old, new))
    return vramwise.Registry(Path(str(resources.files("vramwise.families"))), formulas)


@pytest.mark.parametrize("method,live,dead", [
    ("lora", "lora_gradient_part", "full_gradient_part"),
    ("full", "full_gradient_part", "lora_gradient_part"),
])
def test_only_the_branch_taken_is_live(tmp_path, method, live, dead):
    est = vramwise.estimate_from_size(params=10**9, method=method, registry=_registry(tmp_path))
    assert {t.id for t in est.trace} >= {live, dead}  # both are evaluated
    ids = live_formula_ids(est)
    assert live in ids and dead not in ids
    # every component's formula and those it reads on the branches taken
    assert {"weights_bytes", "lora_bytes", "beyond_weights_bytes", "gradient_bytes", "activation_bytes",
            "overhead_bytes", "total_bytes", "min_per_gpu_bytes", "trainable_params", "model_bytes"} <= ids


def test_live_formulas_of_a_real_estimate_are_evaluated_formulas():
    est = vramwise.estimate({"model_type": "llama", "vocab_size": 1000, "hidden_size": 256,
                             "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
                             "num_key_value_heads": 2}, method="full")
    ids = live_formula_ids(est)
    traced = {t.id for t in est.trace}
    assert ids <= traced and len(ids) < len(traced)  # full fine-tuning reads no adapter formula
