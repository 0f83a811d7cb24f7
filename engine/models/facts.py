"""Facts: the values a family reads from a config, typed and bounded.

Each fact rule of a family names the config fields it may be read from (aliases, in order),
its type and range, and a default or a derivation. :func:`resolve_facts` reads them as
transformers' config classes would, and records where each value came from
(:class:`FactOrigin`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from vramwise.errors import ConfigError, EvaluationError
from vramwise.models.family import Family, FactRule, describe_alias_list

__all__ = ["FactOrigin", "resolve_facts", "INT_MAX", "MAX_LENGTH", "short_repr"]


@dataclass(frozen=True)
class FactOrigin:
    """Where a fact's value came from: a config field, the family's default, or its derivation."""

    how: str  # "config", "default", "derived" or "null" (present in the config as null)
    field: str | None  # the config field that was read (how == "config" or "null")
    where: str  # file:line:col of the fact's rule
    expression: str | None = None  # the derivation (how == "derived")

    def describe(self) -> str:
        if self.how == "config":
            return f"config field {self.field}"
        if self.how == "null":
            return f"config field {self.field} is null"
        if self.how == "derived":
            return f"derived as `{self.expression}`"
        return "default"


_MISSING = object()
_NULL = object()


def _lookup(mapping: Mapping, path: tuple) -> Any:
    """The value at ``path``; ``_MISSING`` when a key is absent, ``_NULL`` when it is present but null."""
    cur: Any = mapping
    for key in path:
        if isinstance(cur, Mapping) and key in cur:
            cur = cur[key]
        else:
            return _MISSING
    return _NULL if cur is None else cur


#: Bounds of a config value where its family sets none: ints up to 2**31 - 1, lists and strings
#: up to 2**20 elements, every number finite.
INT_MAX = 2**31 - 1
MAX_LENGTH = 2**20


#: Element types accepted without a closer look (the closer look names the first bad element).
_PLAIN = {"int": (int,), "number": (int,), "bool": (bool,), "string": (str,)}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _of_type(t: str, value: Any, truncate: bool = False) -> tuple[bool, Any]:
    """Whether ``value`` has type ``t``, and the value as that type.

    An integral float counts as an int (``32.0`` is 32); with ``truncate`` any finite number does, read
    as Python's ``int()`` reads it (toward zero). A 0 or 1 counts as a bool (False, True): the reference
    estimator reads its flags by truthiness, and a config written by other tools may spell them so."""
    if t == "int":
        if isinstance(value, float) and (value.is_integer() or (truncate and math.isfinite(value))):
            value = int(value)
        return isinstance(value, int) and not isinstance(value, bool), value
    if t == "number":
        return _is_number(value) and math.isfinite(value), value
    if t == "bool":
        if _is_number(value) and value in (0, 1):
            value = bool(value)
        return isinstance(value, bool), value
    if t == "string":
        return isinstance(value, str), value
    if t == "list":
        return isinstance(value, (list, tuple)), tuple(value) if isinstance(value, (list, tuple)) else value
    return True, value


def _wanted(t: str) -> str:
    return {"int": "an int", "bool": "a bool (true or false; 0 and 1 are read as false and true)"}.get(t, f"a {t}")


def _truncated(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value) and not value.is_integer()


def _check_type(rule: FactRule, value: Any, origin: str, warnings: list[str] | None = None) -> Any:
    """``value`` checked against the fact's type and bounds (the error names the field and the range).

    A fact marked ``truncate`` reads a number with a fraction as ``int()`` does, as the reference
    estimator reads that field, and says so in ``warnings``."""
    t = rule.type
    raw = value
    ok, value = _of_type(t, value, rule.truncate)
    if not ok:
        raise ConfigError(f"{origin} should be {_wanted(t)}, got {short_repr(raw)}")
    if t == "int" and _truncated(raw) and warnings is not None:
        warnings.append(f"{origin} is {raw!r}; read as {value} (the fraction dropped, as the reference estimator's int() reads it)")
    if t in ("int", "number"):
        lo = rule.min
        hi = rule.max if rule.max is not None else (INT_MAX if t == "int" else None)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            span = " and ".join(f"{word} {_bound(b)}" for word, b in (("at least", lo), ("at most", hi)) if b is not None)
            shown = short_repr(raw) if value == raw else f"{short_repr(raw)} (read as {value})"
            raise ConfigError(f"{origin} is {shown}; it must be {span}")
    elif t in ("list", "string"):
        limit = rule.max_length if rule.max_length is not None else MAX_LENGTH
        if len(value) > limit:
            raise ConfigError(f"{origin} has {len(value):,} {'elements' if t == 'list' else 'characters'}; at most {limit:,} are allowed")
        if t == "list" and rule.items not in (None, "any") and not all(type(x) in _PLAIN[rule.items] for x in value):
            items = []
            for k, x in enumerate(value):
                good, y = _of_type(rule.items, x, rule.truncate)
                if not good:
                    raise ConfigError(f"{origin}[{k}] should be {_wanted(rule.items)}, got {short_repr(x)}")
                items.append(y)
            cut = [x for x in value if rule.items == "int" and _truncated(x)]
            if cut and warnings is not None:
                warnings.append(f"{origin} holds {short_repr(cut)}; read as {short_repr([int(x) for x in cut])} "
                                "(the fractions dropped, as the reference estimator's int() reads them)")
            value = tuple(items)
    return value


def _bound(b: float) -> str:
    return f"{int(b):,}" if float(b).is_integer() else f"{b:g}"


def short_repr(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value that cannot be shown is named by its type
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit] + "..."


def _reduce(value: Any, how: str | None, origin: str) -> Any:
    if how is None or not isinstance(value, (list, tuple)):
        return value
    if not value:
        raise ConfigError(f"config field {origin} is an empty list")
    if how == "first":
        return value[0]
    if how == "last":
        return value[-1]
    bad = [x for x in value if not (_is_number(x) and math.isfinite(x))]
    if bad:
        raise ConfigError(f"config field {origin} should hold numbers (its largest is used), got {short_repr(bad[0])}")
    return max(value)


def resolve_facts(family: Family, root: Mapping, text: Mapping, warnings: list[str], origins: dict) -> dict:
    """Facts in file order, as transformers' config classes resolve them: a value in the config
    wins; an absent field takes the class default (else the derivation); a field present but
    null takes the derivation (what the class computes from None), else stays None."""
    facts: dict[str, Any] = {}
    for rule in family.facts:
        found = []
        null_seen = None
        for alias in rule.aliases:
            v = _lookup(root if alias.from_root else text, alias.path)
            if alias.zero_as_null and _is_number(v) and v == 0:
                v = _NULL
            if v is _NULL:
                null_seen = null_seen or alias.name
            elif v is not _MISSING:
                found.append((alias.name, _reduce(v, alias.reduce, alias.name)))
        if found:
            origin, value = found[0]
            disagree = [n for n, v in found[1:] if v != value]
            if disagree:
                warnings.append(
                    f"config fields {origin} ({value!r}) and {', '.join(disagree)} disagree for {rule.name}; using {origin}"
                )
            label = f"config field {origin}" + ("" if origin == rule.name else f" (read as {rule.name})")
            facts[rule.name] = _check_type(rule, value, label, warnings)
            origins[rule.name] = FactOrigin("config", origin, rule.where)
        elif rule.has_default and not null_seen:
            facts[rule.name] = rule.default
            origins[rule.name] = FactOrigin("default", None, rule.where)
        elif rule.derive is not None:
            try:
                value = rule.derive.evaluate(facts)
            except EvaluationError as e:
                raise ConfigError(
                    f"cannot derive {rule.name} (no field among: {describe_alias_list(rule)}): {e}"
                ) from None
            label = f"{rule.name}, derived from the config as `{rule.derive.text}`,"
            facts[rule.name] = value if value is None else _check_type(rule, value, label, warnings)
            origins[rule.name] = FactOrigin("derived", None, rule.where, rule.derive.text)
        elif null_seen and rule.has_default:  # explicitly null: transformers keeps None
            facts[rule.name] = None
            origins[rule.name] = FactOrigin("null", null_seen, rule.where)
        elif null_seen:
            raise ConfigError(f"config field for {rule.name} is null (tried: {describe_alias_list(rule)}); family {family.name} needs a value")
        else:
            raise ConfigError(
                f"config has no {rule.name} (tried: {describe_alias_list(rule)}); family {family.name} needs it"
            )
    return facts

