"""A profile's test cases (``formulas/<profile>/cases.yaml``), run by ``vramwise check`` and the tests.

Each case gives a config, settings and the figures the profile must give (its total, components or
figures), each written as arithmetic derived by hand from the formulas and the config's numbers and
evaluated by the expression language with no names; a figure may differ from its expected value by
the case's ``tolerance`` (default 0).
"""

from __future__ import annotations

from typing import Any

from vramwise.errors import FileFormatError, VramwiseError
from vramwise.rules.datafiles import DataFile, load_data_file, read_data_text
from vramwise.tooling.examples import expected_value, flat_message

__all__ = ["CASES_FILE", "read_cases", "run_cases"]

#: The file of a profile folder that holds its test cases (not a formula file).
CASES_FILE = "cases.yaml"


def read_cases(formulas: Any, display: str | None, name: str, validate: bool = True) -> DataFile | None:
    """The cases file of profile ``name`` in the formulas root ``formulas`` (shown as ``display``, else by
    its path), or None when the profile has none."""
    item = formulas.joinpath(name, CASES_FILE)
    if not item.is_file():
        return None
    shown = f"{display}/{name}/{CASES_FILE}" if display else str(item)
    df = load_data_file(read_data_text(item, shown), shown, "cases-1.schema.json", validate=validate)
    if df.data["profile"] != name:
        raise FileFormatError(df.problem(("profile",), f"profile {df.data['profile']!r} differs from its folder {name!r}"))
    return df


def run_cases(reg, df: DataFile) -> list[str]:
    """Problems of the cases of ``df`` in registry ``reg``: one ``file:line:col: $.path: case 'name': message``
    each ([] when every case holds)."""
    from vramwise.estimation.estimate import estimate

    profile = df.data["profile"]
    out: list[str] = []
    for k, case in enumerate(df.data["cases"]):
        def fail(parts: tuple, message: str) -> None:
            out.append(df.problem(("cases", k) + parts, f"case {case['name']!r}: {message}"))

        try:
            est = estimate(case["config"], profile=profile, registry=reg, **case["settings"])
        except VramwiseError as e:
            fail(("settings",), flat_message(e))
            continue
        tolerance = case.get("tolerance", 0)
        expect = case["expect"]
        wanted = [(("total",), "total", est.total, expect["total"])] if "total" in expect else []
        for group, got_all in (("components", est.components()), ("figures", est.figures)):
            for fname, value in (expect.get(group) or {}).items():
                wanted.append(((group, fname), f"{group[:-1]} {fname}", got_all.get(fname), value))
        for parts, what, got, value in wanted:
            try:
                want = expected_value(value)
            except VramwiseError as e:
                fail(("expect",) + parts, f"expected value {value!r} is not plain arithmetic: {flat_message(e)}")
                continue
            if got is None:
                fail(("expect",) + parts, f"the estimate has no {what}")
            elif abs(got - want) > tolerance:
                fail(("expect",) + parts, f"{what} is {got:,}, expected {want:,}"
                                          + (f" (within {tolerance:,})" if tolerance else ""))
    return out
