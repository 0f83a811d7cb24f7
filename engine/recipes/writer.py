"""Writing changed settings back in a recipe's own keys (the formats' ``write`` tables)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from vramwise.recipes.formats import Format, canon

__all__ = ["writer"]


def _render(template: Any, value: Any) -> Any:
    if template == "{value}":
        return list(value) if isinstance(value, tuple) else value
    if isinstance(template, str) and "{value}" in template:
        shown = ",".join(value) if isinstance(value, (tuple, list)) else canon(value)
        return template.replace("{value}", shown)
    return template


def _plain_key(fmt: Format, name: str) -> str | None:
    """The key of the first rule that copies a recipe key into ``name`` unchanged."""
    for rule in fmt.settings.get(name, ()) + fmt.extras.get(name, ()):
        if (rule.key and not rule.default and not rule.when and not rule.when_any and rule.mapping is None and rule.match is None
                and not rule.divide_by and not rule.multiply_by):
            return rule.key
    return None


def _invert_collect(fmt: Format, name: str, value: Any) -> dict | None:
    """The keys a collect rule reads, set so that the rule builds ``value`` (None when it cannot)."""
    wanted = list(value) if isinstance(value, (list, tuple)) else [value]
    for rule in fmt.settings.get(name, ()):
        if not rule.collect:
            continue
        out: dict = {}
        covered: set = set()
        for key, items, if_true, _ in rule.collect:
            if items is not None:
                chosen = [item for item, names in items.items() if names and set(names) <= set(wanted)]
                out[key] = chosen
                covered.update(n for item in chosen for n in items[item])
            else:
                on = set(if_true) <= set(wanted)
                out[key] = on
                covered.update(if_true if on else ())
        if covered == set(wanted):
            return out
    return None


def _write_one(formats: tuple, name: str, value: Any) -> dict | None:
    for fmt in formats:
        inverted = _invert_collect(fmt, name, value) if name not in fmt.write else None
        if inverted is not None:
            return inverted
        table = fmt.write.get(name)
        if table:
            keys = table.get(canon(value))
            if keys is None:
                keys = table.get("*")
            if keys is not None:  # empty: the recipe derives this change from others (nothing to write)
                return {k: _render(t, value) for k, t in keys.items()}
            continue
        key = _plain_key(fmt, name)
        if key is not None:
            return {key: list(value) if isinstance(value, tuple) else value}
    return None


def _write_together(formats: tuple, changes: Mapping[str, Any], out: dict) -> set:
    """Write the changes that a format's joined entries (strategy+offload) take together; their names."""
    done: set = set()
    for fmt in formats:
        for joined, table in fmt.write.items():
            names = joined.split("+")
            if len(names) < 2 or not all(n in changes and n not in done for n in names):
                continue
            keys = table.get("+".join(canon(changes[n]) for n in names))
            if keys is not None:
                out.update({k: _render(t, changes[names[0]]) for k, t in keys.items()})
                done.update(names)
    return done


def writer(formats: tuple) -> Callable:
    """A function (recipe, changes) -> ({recipe key: value}, names it could not write) for a recipe read
    with these part formats (the main part's first: a change is written in the first part whose format
    knows how)."""

    def write(recipe, changes: Mapping[str, Any]) -> tuple[dict, tuple]:
        out: dict = {}
        done = _write_together(formats, changes, out)
        left = []
        for name, value in changes.items():
            if name in done:
                continue
            keys = _write_one(formats, name, value)
            if keys is None:
                left.append(name)
            else:
                out.update(keys)
        return out, tuple(left)

    return write
