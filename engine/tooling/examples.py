"""The ``examples:`` of a family file run as test vectors: one runner for ``vramwise check`` and the tests.

Each example gives a config and what it must resolve to: the family chosen, facts, parameters by
group, how the layers group by an attribute, and estimate fields under its settings. Expected
numbers may be written as arithmetic (``2 * 4096 * 128256``), evaluated by the expression
language with no names, the same evaluator as every formula.
"""

from __future__ import annotations

from typing import Any, Callable

from vramwise.errors import VramwiseError
from vramwise.estimation.estimate import estimate, load_model
from vramwise.rules.expr.language import compile_expression

__all__ = ["expected_value", "run_example", "flat_message"]


def expected_value(value: Any) -> Any:
    """An expected value as written: a number, or arithmetic over numbers (no names) evaluated.
    Raises :class:`VramwiseError` when the text is not such an expression or fails."""
    if not isinstance(value, str):
        return value
    return compile_expression(value, allowed=(), what="expected value").evaluate({})


def flat_message(e: BaseException) -> str:
    """An error's problems on one line."""
    problems = getattr(e, "problems", None)
    return "; ".join(problems) if problems else " ".join(str(e).split())


def run_example(reg, family: str, example: dict, where: Callable[[tuple], str] | None = None,
                profile: str | None = None) -> list[str]:
    """Problems of one example of ``family`` in registry ``reg``, one ``place: example 'name': message``
    each ([] when it holds). ``where(parts)`` locates a part of the example (default: the family's name);
    ``profile``: estimate under the example's settings even when it expects no estimate field."""
    name = example.get("name", "?")
    out: list[str] = []
    if where is None:
        def where(parts: tuple) -> str:
            return f"family {family}"

    def fail(parts: tuple, message: str) -> None:
        out.append(f"{where(parts)}: example {name!r}: {message}")

    _UNREAD = object()

    def wanted(parts: tuple, value: Any) -> Any:
        """The expected value written as arithmetic, or _UNREAD (reported) when it is not plain arithmetic."""
        try:
            return expected_value(value)
        except VramwiseError as e:
            fail(parts, f"expected value {value!r} is not plain arithmetic: {flat_message(e)}")
            return _UNREAD

    try:
        fam = reg.family(family)
        if fam.model_types or fam.fallback or fam.abstract:
            spec = load_model(example["config"], registry=reg)  # chosen by model type, as users meet it
        else:  # a family no model type selects (size_only) is asked for by name
            spec = reg.resolve(example["config"], family=family)
    except VramwiseError as e:
        fail(("config",), flat_message(e))
        return out
    expect = example.get("expect") or {}
    if spec.family != expect.get("family", family):
        fail(("expect",), f"family {spec.family!r} was chosen, {expect.get('family', family)!r} expected")
    for fact, value in (expect.get("facts") or {}).items():
        got = spec.facts.get(fact, "(no such fact)")
        if got != value:
            fail(("expect", "facts", fact), f"fact {fact} is {got!r}, expected {value!r}")
    for group, value in (expect.get("params") or {}).items():
        got = spec.params_total if group == "total" else spec.params_by_group.get(group, 0)
        want = wanted(("expect", "params", group), value)
        if want is _UNREAD:
            continue
        if got != want:
            fail(("expect", "params", group), f"params {group} is {got:,}, expected {want:,}")
    for attr, by_value in (expect.get("layers") or {}).items():
        got: dict = {}
        for lc in spec.layer_classes:
            if attr not in lc.attributes:
                break
            got.setdefault(lc.attributes[attr], []).extend(lc.indices)
        else:
            want = {k: sorted(v) for k, v in (by_value or {}).items()}
            have = {k: sorted(v) for k, v in got.items()}
            if have != want:
                fail(("expect", "layers", attr), f"layer attribute {attr} groups the layers as {have}, expected {want}")
            continue
        fail(("expect", "layers", attr), f"no layer attribute {attr}")
    if "estimate" in expect or profile is not None:
        settings = dict(example.get("settings") or {})
        try:
            est = estimate(spec, registry=reg, **settings)
        except VramwiseError as e:
            fail(("settings",) if settings else ("config",), flat_message(e))
            return out
        for fieldname, value in (expect.get("estimate") or {}).items():
            got = getattr(est, fieldname, "(no such field)")
            want = wanted(("expect", "estimate", fieldname), value)
            if want is _UNREAD:
                continue
            if got != want:
                shown = f"{got:,}" if isinstance(got, int) else repr(got)
                fail(("expect", "estimate", fieldname), f"estimate {fieldname} is {shown}, expected {want!r}")
    return out
