"""The safe expression language: what is accepted, what is rejected at load time, and where."""

from __future__ import annotations

import pytest

from vramwise import EvaluationError, ExpressionError
from vramwise.rules.expr.language import LayerValues, compile_expression

NAMES = {"a", "b", "xs", "layer_x"}


def ok(text, env=None, **kw):
    e = compile_expression(text, allowed=NAMES, **kw)
    return e.evaluate(env or {})


def rejected(text, **kw) -> str:
    with pytest.raises(ExpressionError) as info:
        compile_expression(text, allowed=NAMES, **kw)
    return str(info.value)


def test_arithmetic_comparisons_conditionals():
    assert ok("a * (b + 2) // 3", {"a": 4, "b": 7}) == 12  # 4 * 9 // 3
    assert ok("2 ** 10") == 1024
    assert ok("a if a > b else b", {"a": 1, "b": 5}) == 5
    assert ok("not a and b or 7", {"a": True, "b": False}) == 7
    assert ok("xs[1] == 'full'", {"xs": ["sliding", "full"]}) is True
    assert ok("a is None", {"a": None}) is True
    assert ok("max(a, b) + min(a, b) + ceil(2.1) + floor(2.9) + len(xs)", {"a": 1, "b": 2, "xs": [1]}) == 1 + 2 + 3 + 2 + 1
    assert ok("lower('DENSE') == 'dense'") is True
    assert ok("7 / 2") == 3.5  # true division


def test_literals_pass_through():
    assert ok(True) is True
    assert ok(3) == 3
    assert ok(None) is None


def test_layer_values_only_through_reducers():
    env = {"layer_x": LayerValues([(3, 10), (1, 40)])}
    e = compile_expression("layers_sum(layer_x) + layers_max(layer_x)", allowed=NAMES, layer_valued=frozenset({"layer_x"}))
    assert e.evaluate(env) == 3 * 10 + 1 * 40 + 40
    smallest = compile_expression("layers_min(layer_x)", allowed=NAMES, layer_valued=frozenset({"layer_x"}))
    assert smallest.evaluate(env) == 10  # the smaller of the two classes' values, whatever their counts
    msg = rejected("layer_x * 2", layer_valued=frozenset({"layer_x"}))
    assert "layers_sum(layer_x)" in msg


@pytest.mark.parametrize(
    "text,needle",
    [
        ("c + 1", "unknown name `c`"),
        ("a.real", "attribute access is not allowed"),
        ("a.__class__", "attribute access is not allowed"),
        ("a = 3", "assignment is not allowed"),
        ("(a := 3)", "assignment is not allowed"),
        ("a + 1\nb + 2", "more than one expression"),
        ("a; b", "more than one expression"),
        ("2 ^ 30", "`^` operator is bitwise XOR"),
        ("open('x')", "call of `open` is not allowed"),
        ("rand()", "call of `rand` is not allowed"),
        ("__import__('os')", "call of `__import__` is not allowed"),
        ("max(a, key=b)", "keyword arguments are not allowed"),
        ("lambda: 1", "lambda is not allowed"),
        ("[x for x in xs]", "comprehensions are not allowed"),
        ("xs[0:2]", "slices are not allowed"),
        ("a | b", "bitwise `|` is not allowed"),
        ("import os", "only an expression is allowed"),
        ("a +", "invalid syntax"),
        ("", "empty expression"),
    ],
)
def test_rejections(text, needle):
    assert needle in rejected(text)


def test_rejection_points_at_the_column(tmp_path):
    from vramwise.rules.datafiles import DataFile
    import yaml

    text = "formula: a + unknown_thing\n"
    root = yaml.compose(text)
    df = DataFile(path="f.yaml", data=yaml.safe_load(text), root=root)
    with pytest.raises(ExpressionError) as info:
        compile_expression(df.data["formula"], allowed=NAMES, df=df, parts=("formula",))
    # the value starts at column 10; `unknown_thing` is 4 characters further in
    assert str(info.value).startswith("f.yaml:1:14: $.formula: unknown name `unknown_thing`")


def test_evaluation_errors_name_the_place_and_inputs():
    e = compile_expression("a / b", allowed=NAMES)
    with pytest.raises(EvaluationError) as info:
        e.evaluate({"a": 1, "b": 0})
    assert "ZeroDivisionError" in str(info.value) and "b=0" in str(info.value)


def test_cases_table_is_the_nested_conditional():
    table = {"cases": [{"when": "a > 2", "then": "a * 10"}, {"when": "b", "then": 7}], "else": "a + 1"}
    e = compile_expression(table, allowed=NAMES)
    assert e.text == "a * 10 if a > 2 else 7 if b else a + 1"
    assert e.names == {"a", "b"}
    for a, b in ((3, 0), (1, 1), (1, 0)):
        # the first case that holds gives the value: a > 2 -> 10a, else b -> 7, else a + 1
        assert e.evaluate({"a": a, "b": b}) == (a * 10 if a > 2 else 7 if b else a + 1)


def test_cases_tables_nest_and_check_their_names():
    inner = {"cases": [{"when": "b", "then": 1}], "else": 2}
    e = compile_expression({"cases": [{"when": "a", "then": inner}], "else": 3}, allowed=NAMES)
    assert [e.evaluate({"a": a, "b": b}) for a, b in ((1, 1), (1, 0), (0, 1))] == [1, 2, 3]
    assert "unknown name `zz`" in rejected({"cases": [{"when": "zz", "then": 1}], "else": 2})
    assert "exactly `cases`" in rejected({"cases": [{"when": "a", "then": 1}]})
    assert "exactly `when` and `then`" in rejected({"cases": [{"when": "a"}], "else": 2})
    assert "exactly `cases`" in rejected({"cases": [], "else": 2})
