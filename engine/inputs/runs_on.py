"""What runs where: which stacks, kernels and quantizations run on each platform, as data.

The data lives in ``hardware/runs_on.yaml`` (installed as ``vramwise.hardware``) under
``schemas/runs-on-1.schema.json``: the platforms (``cuda``, ``rocm``, ``xpu``, ``apple``), each with the GPU
catalog vendors that run it, and the things that may not run on every platform (a profile's stack, a
quantization, an attention kernel, an optimizer), each with the settings that use it (``when``) and, per
platform, ``yes``, ``no`` (with what runs there ``instead``) or ``unknown`` (with why), and the source that says
so. A platform a thing leaves out is unknown.

:func:`check` is the one rule: for a GPU vendor, a profile and its settings, the things the settings use that
do not run on the vendor's platform (:class:`Refusal`, each with its line) and those the data leaves unknown
there (:class:`Unknown`). No code here names a profile or a platform: the file decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from vramwise.errors import FileFormatError
from vramwise.rules.datafiles import package_files

__all__ = ["Platform", "Refusal", "Unknown", "RunsOn", "RunsOnTable", "check", "platform_of", "runs_on_table",
           "build_runs_on", "RUNS_ON_PATH"]

#: Display path of the bundled file in error messages.
RUNS_ON_PATH = "hardware/runs_on.yaml"
_SCHEMA = "runs-on-1.schema.json"


@dataclass(frozen=True)
class Platform:
    """A platform: its id (``rocm``), its name in words and the catalog vendors whose GPUs run it."""

    id: str
    name: str
    vendors: tuple[str, ...]


@dataclass(frozen=True)
class Claim:
    runs: str  # yes, no, unknown
    source: str
    why: str | None = None
    instead: tuple = ()  # of ((key, value), ...): what runs there instead


@dataclass(frozen=True)
class Thing:
    id: str
    name: str
    when: tuple  # of ((key, (values...)), ...): any one matches when all its keys hold one of their values
    runs: Mapping[str, Claim]

    def used_by(self, settings: Mapping[str, Any]) -> bool:
        return any(all(_holds(settings.get(key), values) for key, values in alternative) for alternative in self.when)


def _holds(value: Any, values: tuple) -> bool:
    # True and 1 are not the same setting value here: a flag matches a flag, a number a number
    return any(value == v and type(value) is type(v) for v in values)


def _words(change: tuple) -> str:
    return ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in change)


@dataclass(frozen=True)
class Refusal:
    """A thing the settings use that does not run on the platform: what, where, the source and what runs there."""

    thing: str
    name: str
    platform: str
    platform_name: str
    source: str
    instead: tuple = ()  # of ((key, value), ...): changes that run there

    @property
    def alternatives(self) -> tuple[str, ...]:
        """What runs there instead, in words: ``attention=sdpa``."""
        return tuple(_words(c) for c in self.instead)

    def line(self) -> str:
        """One line: ``FlashAttention-3 does not run on Intel XPU (source); there: attention=flash_attention_2 or
        attention=sdpa``."""
        there = f"; on {self.platform_name} use {' or '.join(self.alternatives)} instead" if self.instead else ""
        return f"{self.name} does not run on {self.platform_name} ({self.source}){there}"

    def to_dict(self) -> dict:
        return {"thing": self.thing, "name": self.name, "platform": self.platform, "source": self.source,
                "instead": [dict(c) for c in self.instead], "line": self.line()}


@dataclass(frozen=True)
class Unknown:
    """A thing the settings use whose support on the platform no source settles (or the data leaves out)."""

    thing: str
    name: str
    platform: str
    platform_name: str
    why: str
    source: str | None = None

    def line(self) -> str:
        return f"whether {self.name} runs on {self.platform_name} is not known: {self.why}"


@dataclass(frozen=True)
class RunsOn:
    """What :func:`check` found: the platform (None: the vendor runs none the data knows), the refusals and the
    unknowns. ``runs`` is False when anything refuses."""

    platform: Platform | None
    refusals: tuple = ()  # of Refusal
    unknowns: tuple = ()  # of Unknown

    @property
    def runs(self) -> bool:
        return not self.refusals

    def line(self) -> str:
        """The refusals in one line (empty where nothing refuses)."""
        return "; ".join(r.line() for r in self.refusals)


@dataclass(frozen=True)
class RunsOnTable:
    platforms: tuple  # of Platform
    things: tuple  # of Thing
    by_vendor: Mapping[str, Platform]


def build_runs_on(text: str, path: str = RUNS_ON_PATH, *, validate: bool = True) -> RunsOnTable:
    """Parse, validate and index a runs-on file; problems raise :class:`FileFormatError` (``file:line:col``, the
    JSON path)."""
    from vramwise.rules.datafiles import load_data_file

    df = load_data_file(text, path, _SCHEMA, validate=validate)
    data = df.data
    problems: list[str] = []
    platforms: list[Platform] = []
    ids: set[str] = set()
    by_vendor: dict[str, Platform] = {}
    for i, entry in enumerate(data["platforms"]):
        platform = Platform(entry["id"], entry["name"], tuple(entry["vendors"]))
        if platform.id in ids:
            problems.append(df.problem(("platforms", i, "id"), f"duplicate platform id {platform.id!r}"))
            continue
        ids.add(platform.id)
        platforms.append(platform)
        for j, vendor in enumerate(platform.vendors):
            if vendor in by_vendor:
                problems.append(df.problem(("platforms", i, "vendors", j),
                                           f"vendor {vendor!r} already runs platform {by_vendor[vendor].id!r}"))
                continue
            by_vendor[vendor] = platform
    things: list[Thing] = []
    seen: set[str] = set()
    for i, entry in enumerate(data["things"]):
        if entry["id"] in seen:
            problems.append(df.problem(("things", i, "id"), f"duplicate id {entry['id']!r}"))
            continue
        seen.add(entry["id"])
        runs: dict[str, Claim] = {}
        for platform_id, claim in entry["runs"].items():
            if platform_id not in ids:
                problems.append(df.problem(("things", i, "runs", platform_id),
                                           f"unknown platform {platform_id!r} (platforms: {', '.join(sorted(ids))})"))
                continue
            runs[platform_id] = Claim(claim["runs"], claim["source"], claim.get("why"),
                                      tuple(tuple(c.items()) for c in claim.get("instead", ())))
        when = tuple(tuple((k, tuple(v)) for k, v in alt.items()) for alt in entry["when"])
        things.append(Thing(entry["id"], entry["name"], when, runs))
    if problems:
        raise FileFormatError("\n".join(problems))
    return RunsOnTable(tuple(platforms), tuple(things), by_vendor)


@lru_cache(maxsize=1)
def runs_on_table() -> RunsOnTable:
    """The bundled table, read once."""
    text = package_files("vramwise.hardware").joinpath("runs_on.yaml").read_text(encoding="utf-8")
    return build_runs_on(text)


def platform_of(vendor: str | None, table: RunsOnTable | None = None) -> Platform | None:
    """The platform a catalog vendor's GPUs run (None: a size given, or a vendor the data does not know)."""
    return (table or runs_on_table()).by_vendor.get(vendor or "")


def check(vendor: str | None, profile: str, settings: Mapping[str, Any], table: RunsOnTable | None = None,
          reads: frozenset | None = None) -> RunsOn:
    """What of ``profile`` at ``settings`` does not run on ``vendor``'s platform, and what the data leaves
    unknown there; a vendor with no platform (a GPU given by size) gives neither. ``reads``, the settings the
    profile's formulas read: a setting outside them is not the profile's stack's (transformers' ``attention``
    under mlx-lm or llama.cpp), so it makes nothing used; None: every setting counts."""
    table = table or runs_on_table()
    platform = platform_of(vendor, table)
    if platform is None:
        return RunsOn(None)
    given = {k: v for k, v in settings.items() if reads is None or k in reads}
    given["profile"] = profile
    refusals, unknowns = [], []
    for thing in table.things:
        if not thing.used_by(given):
            continue
        claim = thing.runs.get(platform.id)
        if claim is None:
            unknowns.append(Unknown(thing.id, thing.name, platform.id, platform.name, "no source read says"))
        elif claim.runs == "no":
            refusals.append(Refusal(thing.id, thing.name, platform.id, platform.name, claim.source, claim.instead))
        elif claim.runs == "unknown":
            unknowns.append(Unknown(thing.id, thing.name, platform.id, platform.name, claim.why or "", claim.source))
    return RunsOn(platform, tuple(refusals), tuple(unknowns))
