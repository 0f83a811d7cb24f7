"""compile_expression keeps each expression that passed its checks (CHECKED_EXPRESSIONS), by its text, the names
it may read and the names with one value per layer: the same expression under the same names is not parsed,
checked and compiled again, and under other names it is checked again."""

from __future__ import annotations

import pytest

from vramwise import EvaluationError, ExpressionError
from vramwise.rules.expr.language import CHECKED_EXPRESSIONS, compile_expression


@pytest.fixture(autouse=True)
def fresh():
    CHECKED_EXPRESSIONS.clear()
    yield
    CHECKED_EXPRESSIONS.clear()


def test_the_same_expression_is_reused_with_its_own_place():
    first = compile_expression("a * b + 1", allowed={"a", "b"})
    assert len(CHECKED_EXPRESSIONS) == 1
    second = compile_expression("  a * b + 1 ", allowed=frozenset({"b", "a"}))  # the same text, stripped
    assert len(CHECKED_EXPRESSIONS) == 1
    assert second.node is first.node and second.names == first.names == {"a", "b"}
    # 3 * 4 + 1 = 13
    assert first.evaluate({"a": 3, "b": 4}) == second.evaluate({"a": 3, "b": 4}) == 13


def test_the_reused_code_carries_each_place():
    from vramwise.rules.datafiles import load_data_file

    text = "schema_version: 1\n"
    df_a = load_data_file(text, "one.yaml", "family-1.schema.json", validate=False)
    df_b = load_data_file(text, "two.yaml", "family-1.schema.json", validate=False)
    a = compile_expression("x + 1", allowed={"x"}, df=df_a, parts=("schema_version",))
    b = compile_expression("x + 1", allowed={"x"}, df=df_b, parts=("schema_version",))
    assert b.node is a.node
    assert a.where.startswith("one.yaml:1:") and b.where.startswith("two.yaml:1:")
    assert a.code.co_filename == a.where and b.code.co_filename == b.where
    with pytest.raises(EvaluationError, match=r"^two\.yaml:1:\d+: evaluating `x \+ 1` failed"):
        b.evaluate({"x": "text"})  # "text" + 1 is a TypeError, reported at the second place


def test_other_allowed_names_are_checked_again():
    compile_expression("a + b", allowed={"a", "b"})
    with pytest.raises(ExpressionError, match="unknown name `b`"):
        compile_expression("a + b", allowed={"a"})


def test_names_with_a_value_per_layer_are_checked_again():
    compile_expression("x + 1", allowed={"x"})
    with pytest.raises(ExpressionError, match="`x` has one value per layer"):
        compile_expression("x + 1", allowed={"x"}, layer_valued=frozenset({"x"}))


def test_a_failure_is_not_kept_and_a_predicate_is_not_a_key():
    with pytest.raises(ExpressionError):
        compile_expression("a +", allowed={"a"})
    compile_expression("a + 1", allowed=lambda name: name == "a")
    assert len(CHECKED_EXPRESSIONS) == 0


def test_clear_forgets():
    compile_expression("a + 1", allowed={"a"})
    CHECKED_EXPRESSIONS.clear()
    assert len(CHECKED_EXPRESSIONS) == 0
