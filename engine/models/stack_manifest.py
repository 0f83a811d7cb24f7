"""The training stacks manifest (formulas/stacks.yaml): the stacks ``measure`` runs, and its substitutions.

One data file lists every stack: its name (the values of ``stack=``/``--stack``, in order), the
module of :mod:`vramwise.measuring.stacks` that runs it, the profiles whose recipes it runs, and the
prefix of the family facts that belong to it (those facts live in per-stack overlays,
``families/stacks/<stack>/<family>.yaml``, that the family loader merges). It also says which values of
a setting ``measure`` runs (its flags' choices) and what it runs in place of a recipe's setting it cannot
run here. Nothing in Python lists a stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from vramwise.errors import FileFormatError

__all__ = ["MANIFEST_PATH", "Stack", "Substitution", "StackManifest", "stack_manifest", "compile_manifest", "STACK_NAMES", "LazyNames",
           "runnable_names"]

#: The manifest as errors show it.
MANIFEST_PATH = "formulas/stacks.yaml"
_SCHEMA = "stacks-1.schema.json"


@dataclass(frozen=True)
class Stack:
    """One training stack of the manifest."""

    name: str
    summary: str
    module: str  # the module of vramwise.measuring.stacks that runs it
    profiles: tuple  # the profiles whose recipes it runs; the first models it
    facts_prefix: str  # the prefix of the family facts that belong to it
    where: str  # file:line:col of its entry
    strategies: tuple = ()  # the multi-GPU strategies measure runs it under (none: one device only)
    packages: tuple = ()  # the installed packages whose code is the stack's


@dataclass(frozen=True)
class Substitution:
    """What measure runs in place of a recipe's ``setting=value`` it cannot run here, and why."""

    setting: str
    value: str
    runs: str
    reason: str


@dataclass(frozen=True)
class StackManifest:
    stacks: Mapping[str, Stack]  # in the manifest's order
    default: str
    substitutions: Mapping[tuple, Substitution]  # (setting, value) -> substitution
    runnable: Mapping[str, tuple]  # setting -> the values measure runs, in its flag's order

    @property
    def names(self) -> tuple:
        return tuple(self.stacks)

    def stack_of_profile(self, profile: str | None) -> str:
        """The stack that runs a recipe of ``profile`` (the default stack for a profile no stack lists)."""
        for stack in self.stacks.values():
            if profile in stack.profiles:
                return stack.name
        return self.default

    def substitute(self, setting: str, value) -> Substitution | None:
        """What measure runs instead of ``setting=value``; None when it runs the value itself."""
        return self.substitutions.get((setting, value)) if isinstance(value, str) else None

    def stack_of_fact(self, fact: str) -> Stack | None:
        """The stack a family fact belongs to by its name's prefix; None for a fact of the model itself."""
        for stack in self.stacks.values():
            if fact.startswith(stack.facts_prefix):
                return stack
        return None

    @property
    def packages(self) -> tuple:
        """Every stack's packages, once each, in the manifest's order."""
        return tuple(dict.fromkeys(p for s in self.stacks.values() for p in s.packages))


def compile_manifest(df) -> StackManifest:
    """The manifest of a loaded stacks file, cross-checked (a FileFormatError names file:line:col)."""
    data = df.data
    stacks: dict[str, Stack] = {}
    owner: dict[str, str] = {}
    prefixes: dict[str, str] = {}
    for name, entry in data["stacks"].items():
        for k, profile in enumerate(entry["profiles"]):
            if profile in owner:
                raise FileFormatError(df.problem(("stacks", name, "profiles", k),
                                                 f"profile {profile!r} is already run by stack {owner[profile]!r}"))
            owner[profile] = name
        prefix = entry["facts_prefix"]
        for other, theirs in prefixes.items():
            if prefix.startswith(theirs) or theirs.startswith(prefix):
                raise FileFormatError(df.problem(("stacks", name, "facts_prefix"),
                                                 f"facts prefix {prefix!r} overlaps stack {other!r}'s {theirs!r}"))
        prefixes[name] = prefix
        stacks[name] = Stack(name=name, summary=entry["summary"], module=entry["module"], profiles=tuple(entry["profiles"]),
                             facts_prefix=prefix, where=df.key_where(("stacks", name)),
                             strategies=tuple(entry["strategies"]), packages=tuple(entry["packages"]))
    if data["default"] not in stacks:
        raise FileFormatError(df.problem(("default",), f"unknown stack {data['default']!r} (known: {', '.join(stacks)})"))
    subs = {(setting, value): Substitution(setting, value, spec["runs"], spec["reason"])
            for setting, values in data["substitutions"].items() for value, spec in values.items()}
    runnable = {setting: tuple(entry["names"]) for setting, entry in data["runnable"].items()}
    for (setting, value), sub in subs.items():  # a substitution runs a value measure runs, in place of one it does not
        if setting not in runnable:
            continue
        if value in runnable[setting]:
            raise FileFormatError(df.problem(("substitutions", setting, value),
                                             f"{setting} {value} is runnable ($.runnable.{setting}): nothing to substitute"))
        if sub.runs not in runnable[setting]:
            raise FileFormatError(df.problem(("substitutions", setting, value, "runs"),
                                             f"{setting} {sub.runs} is not runnable (runnable: "
                                             f"{', '.join(runnable[setting])})"))
    return StackManifest(stacks=MappingProxyType(stacks), default=data["default"], substitutions=MappingProxyType(subs),
                         runnable=MappingProxyType(runnable))


@lru_cache(maxsize=1)
def stack_manifest() -> StackManifest:
    """The bundled manifest, read once (``stack_manifest.cache_clear()`` forgets it)."""
    from vramwise.rules.datafiles import load_data_file, package_files, read_data_text

    item = package_files("vramwise.formulas").joinpath("stacks.yaml")
    return compile_manifest(load_data_file(read_data_text(item, MANIFEST_PATH), MANIFEST_PATH, _SCHEMA, validate=False))


class LazyNames(Sequence):
    """A tuple of names read from a data file when first used; ``_names`` says which (importing reads no file)."""

    __slots__ = ()

    def _names(self) -> tuple:
        raise NotImplementedError

    def __getitem__(self, i):
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self):
        return iter(self._names())

    def __contains__(self, value) -> bool:
        return value in self._names()

    def __eq__(self, other) -> bool:
        return self._names() == (tuple(other) if isinstance(other, Sequence) and not isinstance(other, str) else other)

    def __hash__(self) -> int:
        return hash(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


class _StackNames(LazyNames):
    """The stack names of the manifest, read when first used (importing this module reads no file)."""

    __slots__ = ()

    def _names(self) -> tuple:
        return stack_manifest().names


#: The names of the stacks, in the manifest's order (``stack=`` and ``--stack`` take one of them).
STACK_NAMES: Sequence = _StackNames()


class _RunnableNames(LazyNames):
    """The values of one setting that measure runs (the manifest's ``runnable``), read when first used."""

    __slots__ = ("_setting",)

    def __init__(self, setting: str):
        self._setting = setting

    def _names(self) -> tuple:
        return stack_manifest().runnable[self._setting]


def runnable_names(setting: str) -> Sequence:
    """The values of ``setting`` that measure runs, in the order its flag offers them (formulas/stacks.yaml
    ``runnable``), read when first used: the choices of measure's flag."""
    return _RunnableNames(setting)
