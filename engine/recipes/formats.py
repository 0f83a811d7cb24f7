"""Recipe formats: the data files of ``frameworks/`` (schema ``recipe-format-1``) and their rules.

One file per format says how a recipe of that framework is recognised (``detect``), where its model,
profile, settings and extras come from (``rules``: tried in order, the first that gives a value
wins), which keys name other files (``references``), which keys change memory without being
modelled (``unmodelled``), which keys are known not to matter (``ignored``) and how a changed
setting is written back (``write``). Nothing here knows a framework by name.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from vramwise.rules.datafiles import load_data_file, package_files, read_data_text, read_folder
from vramwise.errors import FileFormatError, SettingsError

__all__ = ["Rule", "Format", "Formats", "Release", "ReleaseSignal", "MISSING", "canon", "lookup", "version_tuple"]

FORMATS_DISPLAY = "frameworks"
SCHEMA = "recipe-format-1.schema.json"
#: The launchers' grammar (``vramwise.recipes.launch``) lives beside the formats and is not one of them.
LAUNCHERS_FILE = "launchers.yaml"


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


#: A key that is not in the recipe (distinct from a key set to null).
MISSING = _Missing()


def canon(value: Any) -> str:
    """A raw value as the text ``map``, ``when``, ``skip`` and ``write`` compare: true/false/null, numbers and
    strings as written, a list as its items' texts sorted and joined by commas."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return ",".join(sorted(canon(v) for v in value))
    return str(value)


def lookup(data: Any, path: str) -> Any:
    """The value at a dotted path of nested mappings, or :data:`MISSING`."""
    node = data
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def version_tuple(text: str) -> tuple:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:4])


def _truthy(value: Any) -> bool:
    return value is not MISSING and value not in (None, False, 0, "", "none", "None", "false", "False") \
        and not (isinstance(value, (list, dict, tuple)) and not value)


@dataclass(frozen=True)
class Condition:
    key: str
    equals: Any = MISSING
    within: tuple | None = None
    not_within: tuple | None = None
    matches: Any = None  # compiled regex
    present: bool | None = None
    truthy: bool | None = None

    def holds(self, data: Any) -> bool:
        raw = lookup(data, self.key)
        if self.present is not None and (raw is not MISSING) != self.present:
            return False
        if self.truthy is not None and _truthy(raw) != self.truthy:
            return False
        if self.equals is not MISSING:
            if self.equals is None:
                if raw is not MISSING and raw is not None:
                    return False
            elif raw is MISSING or canon(raw) != canon(self.equals):
                return False
        text = "null" if raw is MISSING else canon(raw)  # in lists, null stands for absent or null too
        if self.within is not None and text not in self.within:
            return False
        if self.not_within is not None and text in self.not_within:
            return False
        if self.matches is not None and (raw is MISSING or raw is None or not self.matches.search(canon(raw))):
            return False
        return True


def _conditions(spec: Any) -> tuple:
    if spec is None:
        return ()
    if isinstance(spec, Mapping):
        return tuple(Condition(k, equals=v) for k, v in spec.items())
    out = []
    for c in spec:
        out.append(Condition(
            c["key"], equals=c.get("equals", MISSING),
            within=tuple(canon(v) for v in c["in"]) if "in" in c else None,
            not_within=tuple(canon(v) for v in c["not_in"]) if "not_in" in c else None,
            matches=re.compile(c["matches"]) if "matches" in c else None,
            present=c.get("present"), truthy=c.get("truthy")))
    return tuple(out)


@dataclass(frozen=True)
class Rule:
    """One way to get a value (see the schema's ``rule``); ``where`` is its place in the format file."""

    key: str | None
    value: Any
    when: tuple
    mapping: Mapping[str, Any] | None
    strict_map: bool
    match: Any
    divide_by: tuple  # keys whose whole values divide the value, in turn
    multiply_by: tuple  # keys whose whole values multiply it
    floor: bool  # divide_by rounds down instead of requiring an exact quotient
    skip: frozenset
    default: bool
    since: tuple | None
    until: tuple | None
    source: str | None
    where: str
    collect: tuple = ()  # ((key, items mapping or None, if_true tuple or None, absent), ...)
    when_any: tuple = ()  # conditions of which one must hold
    wins: bool = False  # wins over the other parts' own keys
    description: str | None = None  # what the framework does to the recipe here, shown beside the value

    def holds(self, data: Any) -> bool:
        """The rule's conditions hold for ``data`` (all of when, one of when_any)."""
        return all(c.holds(data) for c in self.when) and (not self.when_any or any(c.holds(data) for c in self.when_any))

    def applies_to(self, version: tuple | None) -> bool:
        if version is None:
            return True
        return (self.since is None or version >= self.since) and (self.until is None or version < self.until)

    def keys(self) -> list[str]:
        """Every recipe key the rule reads."""
        out = [c.key for c in self.when + self.when_any]
        if self.key:
            out.append(self.key)
        out.extend(self.divide_by)
        out.extend(self.multiply_by)
        out.extend(c[0] for c in self.collect)
        return out


def _keys(value: Any) -> tuple:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True)
class Release:
    """One release of a framework that a format knows (``framework.releases``; without that list, the pinned
    version alone)."""

    version: str
    date: str | None = None
    source: str | None = None
    note: str | None = None

    @property
    def key(self) -> tuple:
        return version_tuple(self.version)


@dataclass(frozen=True)
class ReleaseSignal:
    """Recipe keys that tell which releases a recipe was written for (``framework.release_signals``): when
    ``when`` holds, only releases from ``since`` (inclusive) and before ``until`` are candidates."""

    when: tuple
    since: tuple | None
    until: tuple | None
    source: str
    description: str | None = None

    def allows(self, version: tuple) -> bool:
        return (self.since is None or version >= self.since) and (self.until is None or version < self.until)

    def says(self) -> str:
        """The signal in words: its keys and the release range it gives."""
        keys = ", ".join(dict.fromkeys(c.key for c in self.when))
        what = f" ({self.description})" if self.description else ""
        bounds = []
        if self.since is not None:
            bounds.append(f"from {'.'.join(map(str, self.since))}")
        if self.until is not None:
            bounds.append(f"before {'.'.join(map(str, self.until))}")
        return f"{keys}{what}: releases {' and '.join(bounds)}"


def _rule(r: Mapping, where: str) -> Rule:
    mapping = None
    if "map" in r:
        mapping = {canon(k): v for k, v in r["map"].items()}
    return Rule(
        key=r.get("key"), value=r.get("value"), when=_conditions(r.get("when")), mapping=mapping,
        strict_map=bool(r.get("strict_map", False)), match=re.compile(r["match"]) if "match" in r else None,
        divide_by=_keys(r.get("divide_by")), multiply_by=_keys(r.get("multiply_by")),
        floor=r.get("rounding") == "floor", skip=frozenset(canon(v) for v in r.get("skip", ())),
        default=bool(r.get("default", False)),
        since=version_tuple(r["since"]) if "since" in r else None,
        until=version_tuple(r["until"]) if "until" in r else None,
        source=r.get("source"), where=where,
        collect=tuple((c["key"], {canon(k): tuple(v) for k, v in c["items"].items()} if "items" in c else None,
                       tuple(c["if_true"]) if "if_true" in c else None, bool(c.get("absent", False)))
                      for c in r.get("collect", ())),
        when_any=_conditions(r.get("when_any")),
        wins=bool(r.get("wins", False)),
        description=r.get("description"),
    )


@dataclass(frozen=True)
class Format:
    """One recipe format, compiled from its data file."""

    name: str
    description: str
    framework: str
    version: str
    source: str
    aliases: tuple
    part: bool
    requires: tuple
    signals: tuple  # ((key, weight, regex or None), ...)
    model: tuple  # of Rule
    profile: tuple
    settings: Mapping[str, tuple]
    extras: Mapping[str, tuple]
    references: tuple  # ((key, format, description), ...)
    unmodelled: tuple  # ((key, conditions, why, since, until), ...): since/until date it as rules are dated
    ignored: tuple
    write: Mapping[str, Mapping[str, Mapping[str, Any]]]
    file: str
    warn_unknown: bool = True  # an unknown key gives a warning
    header_launch: tuple | None = None  # (launcher, source): a launch line its files' leading comment may hold
    shipped_configs: tuple | None = None  # (folder under frameworks/, source): the configs its releases ship
    releases: tuple = ()  # of Release, oldest first; empty: the pinned version is the one release known
    release_signals: tuple = ()  # of ReleaseSignal

    def known_releases(self) -> tuple:
        """The releases the format knows, oldest first (the pinned version alone when the file lists none)."""
        return self.releases or (Release(self.version),)

    @property
    def newest(self) -> Release:
        """The newest release the format knows: the one a recipe is read under unless one is named."""
        return self.known_releases()[-1]

    def release(self, version: str) -> Release | None:
        """The known release ``version`` names (``0.5`` and ``0.5.0`` alike), or None."""
        wanted = version_tuple(version)
        return next((r for r in self.known_releases() if _same_version(r.key, wanted)), None)

    def signals_of(self, data: Any) -> tuple:
        """The release signals whose conditions hold for ``data``."""
        return tuple(s for s in self.release_signals if all(c.holds(data) for c in s.when))

    def candidates(self, signals: tuple) -> tuple:
        """The known releases every signal of ``signals`` allows, oldest first."""
        return tuple(r for r in self.known_releases() if all(s.allows(r.key) for s in signals))

    def score(self, data: Mapping) -> int:
        """How strongly ``data`` looks like this format (0: not at all)."""
        if any(lookup(data, k) is MISSING for k in self.requires):
            return 0
        total = 0
        for key, weight, regex in self.signals:
            raw = lookup(data, key)
            if raw is MISSING:
                continue
            if regex is not None and (raw is None or not regex.search(canon(raw))):
                continue
            total += weight
        return total

    def known_keys(self) -> frozenset:
        """Every key the format reads or knows (a key covers the keys under it); worked out once."""
        return self._known_keys

    @cached_property
    def _known_keys(self) -> frozenset:
        keys: set = set(self.requires) | {s[0] for s in self.signals} | set(self.ignored)
        for group in (self.model, self.profile, *self.settings.values(), *self.extras.values()):
            for rule in group:
                keys.update(rule.keys())
        keys.update(r[0] for r in self.references)
        keys.update(c.key for signal in self.release_signals for c in signal.when)  # a key that tells a release
        for key, conds, *_ in self.unmodelled:
            keys.add(key)
            keys.update(c.key for c in conds)
        return frozenset(keys)


def _same_version(a: tuple, b: tuple) -> bool:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) == b + (0,) * (width - len(b))


def _releases(df) -> tuple:
    """The file's releases, oldest first."""
    items = [Release(r["version"], r["date"], r["source"], r.get("note"))
             for r in df.data["framework"].get("releases", ())]
    return tuple(sorted(items, key=lambda r: r.key))


def _release_signals(d: Mapping) -> tuple:
    return tuple(ReleaseSignal(_conditions(s["when"]),
                               version_tuple(s["since"]) if "since" in s else None,
                               version_tuple(s["until"]) if "until" in s else None,
                               s["source"], s.get("description"))
                 for s in d["framework"].get("release_signals", ()))


def _release_problems(df, fmt: Format) -> list:
    """A releases list that does not hold the pinned version, a release listed twice, a rule or release signal
    dated by a release the file does not list, or a signal that allows no release: each with file:line:col and
    JSON path."""
    signals = df.data["framework"].get("release_signals", ())
    if not fmt.releases:
        return [df.problem(("framework", "release_signals"), "release signals need the releases they date "
                                                              "(framework.releases)")] if signals else []
    problems = []
    listed = df.data["framework"]["releases"]
    keys = [version_tuple(r["version"]) for r in listed]
    for i, key in enumerate(keys):
        if any(_same_version(key, k) for k in keys[:i]):
            problems.append(df.problem(("framework", "releases", i, "version"),
                                       f"release {listed[i]['version']} is listed twice"))
    if fmt.release(fmt.version) is None:
        problems.append(df.problem(("framework", "releases"), f"the pinned version {fmt.version} is not among the "
                                                              "releases"))
    known = ", ".join(r.version for r in fmt.releases)
    d = df.data
    groups = [(("model",), d.get("model", [])), (("profile",), d.get("profile", []))]
    groups += [(("settings", k), v) for k, v in d["settings"].items()]
    groups += [(("extras", k), v) for k, v in d.get("extras", {}).items()]
    groups.append((("unmodelled",), d.get("unmodelled", [])))
    for parts, group in groups:
        for i, rule in enumerate(group):
            for field in ("since", "until"):
                if field in rule and fmt.release(str(rule[field])) is None:
                    problems.append(df.problem(parts + (i, field), f"{field} {rule[field]} is not a release the "
                                                                   f"file lists (releases: {known})"))
    for i, (raw, signal) in enumerate(zip(signals, fmt.release_signals)):
        where = ("framework", "release_signals", i)
        bad = [f for f in ("since", "until") if f in raw and fmt.release(str(raw[f])) is None]
        for field in bad:
            problems.append(df.problem(where + (field,), f"{field} {raw[field]} is not a release the file lists "
                                                         f"(releases: {known})"))
        if not bad and not fmt.candidates((signal,)):
            problems.append(df.problem(where, "the signal allows none of the releases the file lists"))
    return problems


def _compile(df) -> Format:
    d = df.data
    path = df.path

    def rules(group: list, parts: tuple) -> tuple:
        return tuple(_rule(r, df.where(parts + (i,))) for i, r in enumerate(group))

    fw = d["framework"]
    detect = d["detect"]
    return Format(
        name=d["format"], description=d["description"], framework=fw["name"], version=fw["version"],
        source=fw["source"], aliases=tuple(fw.get("aliases", ())), part=bool(d.get("part", False)),
        requires=tuple(detect.get("requires", ())),
        signals=tuple((s["key"], s["weight"], re.compile(s["matches"]) if "matches" in s else None)
                      for s in detect["signals"]),
        model=rules(d.get("model", []), ("model",)),
        profile=rules(d.get("profile", []), ("profile",)),
        settings={k: rules(v, ("settings", k)) for k, v in d["settings"].items()},
        extras={k: rules(v, ("extras", k)) for k, v in d.get("extras", {}).items()},
        references=tuple((r["key"], r["format"], r["description"]) for r in d.get("references", ())),
        unmodelled=tuple((u["key"], _conditions(u.get("when")), u["why"],
                          version_tuple(u["since"]) if "since" in u else None,
                          version_tuple(u["until"]) if "until" in u else None) for u in d.get("unmodelled", ())),
        ignored=tuple(d.get("ignored", ())),
        write={k: {canon(v) if v != "*" else "*": dict(keys) for v, keys in table.items()}
               for k, table in d.get("write", {}).items()},
        file=path, warn_unknown=d.get("unknown_keys", "warn") == "warn",
        header_launch=(d["header_launch"]["launcher"], d["header_launch"]["source"]) if "header_launch" in d else None,
        shipped_configs=(d["shipped_configs"]["folder"], d["shipped_configs"]["source"]) if "shipped_configs" in d
        else None,
        releases=_releases(df),
        release_signals=_release_signals(d),
    )


class Formats:
    """The recipe formats of one folder (the bundled ``frameworks/`` by default), read once."""

    def __init__(self, formats: Mapping[str, Format]):
        self._formats = dict(formats)
        self._names: dict = {}
        for f in self._formats.values():
            for name in (f.name, *f.aliases):
                self._names[name] = f

    @classmethod
    def load(cls, folder=None, *, validate: bool | None = None) -> "Formats":
        """The formats of ``folder`` (a path; default: the bundled ones). Files from a folder are
        validated against the schema; the bundled ones are validated by the test suite."""
        from vramwise.profiles.settings import SETTING_NAMES

        if folder is None:
            items = read_folder(package_files("vramwise.frameworks"), FORMATS_DISPLAY)
            validate = bool(validate)
        else:
            from pathlib import Path

            items = read_folder(Path(folder), None)
            validate = True if validate is None else validate
        formats: dict = {}
        problems: list = []
        for shown, text in items:
            if PurePath(shown).name == LAUNCHERS_FILE:
                continue
            df = load_data_file(text, shown, SCHEMA, validate=validate)
            fmt = _compile(df)
            problems.extend(_release_problems(df, fmt))
            for name in fmt.settings:
                if name not in SETTING_NAMES:
                    problems.append(df.problem(("settings", name), f"{name!r} is not a vramwise setting"))
            if fmt.name in formats:
                problems.append(df.problem(("format",), f"format {fmt.name!r} is defined twice "
                                                       f"(also in {formats[fmt.name].file})"))
            formats[fmt.name] = fmt
        for fmt in formats.values():
            for i, (_, target, _) in enumerate(fmt.references):
                if target not in formats:
                    problems.append(f"{fmt.file}: $.references[{i}].format: unknown format {target!r} "
                                    f"(formats: {', '.join(sorted(formats))})")
        if problems:
            raise FileFormatError(problems)
        return cls(formats)

    def names(self) -> list[str]:
        return sorted(self._formats)

    def __iter__(self):
        return iter(self._formats.values())

    def get(self, name: str) -> Format:
        """The format named ``name`` (or an alias); SettingsError listing the formats otherwise."""
        fmt = self._names.get(name)
        if fmt is None:
            raise SettingsError(f"unknown recipe format {name!r} (formats: {', '.join(self.names())})")
        return fmt
