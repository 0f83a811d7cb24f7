"""The GPU catalog: memory totals of the GPUs people fine-tune on, looked up by name or size.

The data lives in ``hardware/gpus.yaml`` (installed as ``vramwise.hardware``) under
``schemas/hardware-1.schema.json``. It is read, validated and indexed the first time a GPU
is looked up; an estimate never loads it.

Lookup rules of :func:`gpu_spec`:

* **Names** are matched after normalising: lower case; spaces, dashes, underscores, dots and
  slashes removed; the brand words ``nvidia``, ``geforce``, ``tesla``, ``amd``, ``instinct``,
  ``radeon``, ``intel`` and ``arc`` dropped. So ``"RTX 4090"``, ``"rtx-4090"``, ``"NVIDIA GeForce RTX 4090"`` and ``"rtx4090"``
  are one name; ``"4090"`` is an alias in the catalog.
* **Ambiguous names** (``"H100"``, ``"A100"``, ``"A100 40GB"``, ``"H200"``, ``"V100"``,
  ``"RTX 6000"``) resolve to the default the catalog documents for them; the result's
  ``matched_by`` is ``"ambiguous"`` and ``alternatives`` lists the other candidates.
* **Sizes**: a number with a unit, ``24GiB``, ``24 GiB``, ``80GB``, ``80 GB``, ``0.5TB``,
  ``16384MiB``, read by the one size parser, :func:`vramwise.inputs.sizes.parse_size`:
  ``GB``/``MB``/``TB`` are decimal (10**9, 10**6, 10**12 bytes), ``GiB``/``MiB``/``TiB`` binary
  (2**30, 2**20, 2**40); the unit used is in ``size_unit``. A GPU size needs its unit: a number
  with none (``24``, unless the catalog has it as a name) is rejected as ambiguous, as is a bare
  ``G``, ``M`` or ``T`` (``24g``).
* Anything else raises :class:`~vramwise.SettingsError` naming the closest catalog names.

**Unified memory.** An entry with ``unified: true`` (Apple Silicon, AMD APUs) shares its memory with the
CPU: its ``memory_bytes`` is the system's total, and what its GPU may use is the rule its ``budget``
names in the file's ``unified_budgets`` (an expression over ``memory``, read by the sandboxed
evaluator, with its sources). :func:`unified_budget` evaluates it for an entry;
:func:`budget_for_memory` for a memory size local discovery reads (the same rule).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from vramwise.errors import FileFormatError, SettingsError
from vramwise.inputs.sizes import UNIT_BASES, parse_size, split_number
from vramwise.rules.datafiles import package_files

__all__ = ["GpuSpec", "AmbiguousGpuName", "UnifiedBudget", "BudgetRule", "gpu_spec", "list_gpus",
           "list_ambiguous_gpu_names", "unified_budget", "budget_rule", "budget_for_memory", "CATALOG_PATH"]

#: Display path of the bundled catalog in error messages.
CATALOG_PATH = "hardware/gpus.yaml"
_SCHEMA = "hardware-1.schema.json"

_DROP_WORDS = ("nvidia", "geforce", "tesla", "amd", "instinct", "radeon", "intel", "arc")
_SEPARATORS = re.compile(r"[\s\-_./]+")


@dataclass(frozen=True)
class GpuSpec:
    """One GPU of the catalog, or a memory size given directly, and how the query matched it.

    ``matched_by`` is one of ``"catalog"`` (from :func:`list_gpus`), ``"id"``, ``"name"``,
    ``"alias"``, ``"ambiguous"`` (a name with several candidates, resolved to the catalog's
    default: ``alternatives`` holds the other ids and ``note`` why this one) or ``"size"``
    (``vendor`` is ``"unknown"``, ``size_unit`` the unit the size was given in).
    """

    id: str
    name: str
    vendor: str
    memory_bytes: int
    source: str
    nvml_visible: bool
    memory_reading: str = "spec-sheet"
    aliases: tuple[str, ...] = ()
    note: str | None = None
    matched_by: str = "catalog"
    query: str | None = None
    alternatives: tuple[str, ...] = ()
    size_unit: str | None = None
    cuda_total_bytes: int | None = None  # the total CUDA reports (torch.cuda.mem_get_info), where it is known
    cuda_total_source: str | None = None
    unified: bool = False  # memory shared with the CPU: memory_bytes is the system's, ``budget`` gives the GPU's share
    budget: str | None = None  # id of the unified_budgets rule (unified entries only)

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30

    @property
    def memory_gb(self) -> float:
        return self.memory_bytes / 10**9


@dataclass(frozen=True)
class AmbiguousGpuName:
    """A name that matches several GPUs of the catalog, the one it resolves to, and why."""

    name: str
    default: str
    candidates: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class BudgetRule:
    """One ``unified_budgets`` rule: what the GPU of a unified-memory device may use of ``memory``."""

    id: str
    share: str  # the rule in words
    source: str
    measured: str | None = None  # what reads the figure on the device itself
    override: str | None = None  # how a user changes it
    not_modelled: str | None = None
    expression: Any = field(default=None, repr=False, compare=False)  # the checked gpu_may_use expression

    def gpu_bytes(self, memory: int) -> int:
        """The bytes the GPU may use of ``memory`` bytes of system memory, by the rule."""
        return int(self.expression.evaluate({"memory": int(memory)}))


@dataclass(frozen=True)
class UnifiedBudget:
    """What the GPU of a unified-memory catalog entry may use: ``gpu_bytes`` of the system's ``memory_bytes``,
    by ``rule``; the OS and other processes keep ``kept_bytes``."""

    gpu_id: str
    memory_bytes: int
    gpu_bytes: int
    rule: BudgetRule

    @property
    def kept_bytes(self) -> int:
        return self.memory_bytes - self.gpu_bytes

    @property
    def share(self) -> float:
        return self.gpu_bytes / self.memory_bytes

    def line(self) -> str:
        """The budget in one line: unified memory, the share the GPU may use and where the figure comes from."""
        return (f"unified memory: the GPU may use {self.gpu_bytes / 2**30:.2f} GiB of the system's "
                f"{self.memory_bytes / 2**30:.2f} GiB ({100 * self.share:.1f} %, rule {self.rule.id} of {CATALOG_PATH}: "
                f"{self.rule.share}); the OS and other processes keep {self.kept_bytes / 2**30:.2f} GiB")


def normalize(name: str) -> str:
    """The form names are compared in: lower case, no separators, no vendor/brand words."""
    words = [w for w in _SEPARATORS.split(name.strip().lower()) if w and w not in _DROP_WORDS]
    return "".join(words)


@dataclass(frozen=True)
class _Catalog:
    gpus: tuple[GpuSpec, ...]
    by_id: dict[str, GpuSpec]
    index: dict[str, tuple[str, str]]  # normalised name -> (gpu id, "id" | "name" | "alias")
    ambiguous: dict[str, tuple[str, tuple[str, ...], str, str]]  # normalised -> (default, candidates, reason, name)
    display: dict[str, str]  # normalised key -> a display form for "did you mean"
    budgets: dict = field(default_factory=dict)  # rule id -> BudgetRule


def _load_text() -> str:
    return package_files("vramwise.hardware").joinpath("gpus.yaml").read_text(encoding="utf-8")


def build_catalog(text: str, path: str = CATALOG_PATH, *, validate: bool = True) -> _Catalog:
    """Parse, validate and index a catalog file; problems raise :class:`FileFormatError`."""
    from vramwise.rules.datafiles import load_data_file

    df = load_data_file(text, path, _SCHEMA, validate=validate)
    data = df.data
    problems: list[str] = []
    budgets = _budget_rules(df, data.get("unified_budgets", []), problems)
    gpus: list[GpuSpec] = []
    by_id: dict[str, GpuSpec] = {}
    index: dict[str, tuple[str, str]] = {}
    display: dict[str, str] = {}
    where: dict[str, tuple] = {}
    for i, entry in enumerate(data["gpus"]):
        spec = GpuSpec(
            id=entry["id"], name=entry["name"], vendor=entry["vendor"], memory_bytes=entry["memory_bytes"],
            source=entry["source"], nvml_visible=entry["nvml_visible"], memory_reading=entry["memory_reading"],
            aliases=tuple(entry["aliases"]), note=entry.get("note"),
            cuda_total_bytes=entry.get("cuda_total_bytes"), cuda_total_source=entry.get("cuda_total_source"),
            unified=bool(entry.get("unified", False)), budget=entry.get("budget"),
        )
        if spec.unified and spec.budget is None:
            problems.append(df.problem(("gpus", i, "unified"), "a unified entry names its budget rule (budget)"))
        elif not spec.unified and spec.budget is not None:
            problems.append(df.problem(("gpus", i, "budget"), "budget is for unified entries (unified: true) only"))
        elif spec.budget is not None and spec.budget not in budgets:
            problems.append(df.problem(("gpus", i, "budget"), f"unknown budget rule {spec.budget!r} "
                                                              f"(unified_budgets: {', '.join(budgets) or 'none'})"))
        if spec.id in by_id:
            problems.append(df.problem(("gpus", i, "id"), f"duplicate GPU id {spec.id!r}"))
            continue
        by_id[spec.id] = spec
        gpus.append(spec)
        keys = [(spec.id, "id", ("gpus", i, "id")), (spec.name, "name", ("gpus", i, "name"))]
        keys += [(a, "alias", ("gpus", i, "aliases", j)) for j, a in enumerate(spec.aliases)]
        for text_key, kind, parts in keys:
            key = normalize(text_key)
            if not key:
                problems.append(df.problem(parts, f"{text_key!r} is empty once normalised"))
                continue
            other = index.get(key)
            if other is not None and other[0] != spec.id:
                problems.append(df.problem(parts, f"{text_key!r} also names GPU {other[0]!r} (at {df.where(where[key])})"))
                continue
            if other is None:
                index[key] = (spec.id, kind)
                display[key] = text_key if kind != "name" else spec.id
                where[key] = parts
    ambiguous: dict[str, tuple[str, tuple[str, ...], str, str]] = {}
    for i, entry in enumerate(data.get("ambiguous", [])):
        key = normalize(entry["name"])
        parts = ("ambiguous", i)
        for cid in [entry["default"], *entry["candidates"]]:
            if cid not in by_id:
                problems.append(df.problem(parts, f"unknown GPU id {cid!r}"))
        if entry["default"] not in entry["candidates"]:
            problems.append(df.problem(parts + ("default",), f"default {entry['default']!r} is not among the candidates"))
        if key in index:
            problems.append(df.problem(parts + ("name",), f"{entry['name']!r} already names GPU {index[key][0]!r}"))
        if key in ambiguous:
            problems.append(df.problem(parts + ("name",), f"ambiguous name {entry['name']!r} given twice"))
        ambiguous[key] = (entry["default"], tuple(entry["candidates"]), entry["reason"], entry["name"])
        display[key] = entry["name"]
    if problems:
        raise FileFormatError(problems)
    return _Catalog(tuple(gpus), by_id, index, ambiguous, display, budgets)


def _budget_rules(df, entries: list, problems: list[str]) -> dict:
    """The ``unified_budgets`` rules by id, each expression checked by the expression language."""
    from vramwise.errors import ExpressionError
    from vramwise.rules.expr.language import compile_expression

    rules: dict = {}
    for i, entry in enumerate(entries):
        if entry["id"] in rules:
            problems.append(df.problem(("unified_budgets", i, "id"), f"duplicate budget rule {entry['id']!r}"))
            continue
        try:
            expr = compile_expression(entry["gpu_may_use"], allowed={"memory"}, df=df,
                                      parts=("unified_budgets", i, "gpu_may_use"), what="gpu_may_use")
        except ExpressionError as e:
            problems.append(str(e))
            continue
        rules[entry["id"]] = BudgetRule(entry["id"], entry["share"], entry["source"], entry.get("measured"),
                                        entry.get("override"), entry.get("not_modelled"), expr)
    return rules


@lru_cache(maxsize=1)
def _catalog() -> _Catalog:
    # the bundled file is validated against its schema by the test suite, not at every lookup
    return build_catalog(_load_text(), validate=False)


def list_gpus() -> tuple[GpuSpec, ...]:
    """Every GPU of the bundled catalog, in file order."""
    return _catalog().gpus


def list_ambiguous_gpu_names() -> tuple[AmbiguousGpuName, ...]:
    """The catalog's names that match several GPUs, in file order, each with its default and candidates."""
    return tuple(AmbiguousGpuName(name, default, candidates, reason)
                 for default, candidates, reason, name in _catalog().ambiguous.values())


def budget_rule(rule_id: str) -> BudgetRule:
    """The bundled catalog's unified-memory budget rule ``rule_id``."""
    rules = _catalog().budgets
    if rule_id not in rules:
        raise SettingsError(f"unknown unified-memory budget rule {rule_id!r} (choose from: {', '.join(rules)})")
    return rules[rule_id]


def budget_for_memory(rule_id: str, memory: int) -> int:
    """The bytes the GPU may use of ``memory`` bytes of system memory by the rule ``rule_id`` (local discovery
    uses it where the device gives no figure of its own)."""
    return budget_rule(rule_id).gpu_bytes(memory)


def unified_budget(spec: GpuSpec) -> UnifiedBudget | None:
    """What the GPU of a unified-memory entry may use, by its budget rule; None for dedicated memory (a
    discrete GPU, or a size given, which stays dedicated)."""
    if not spec.unified or spec.budget is None:
        return None
    rule = budget_rule(spec.budget)
    return UnifiedBudget(spec.id, spec.memory_bytes, rule.gpu_bytes(spec.memory_bytes), rule)


def _parse_size(query: str) -> GpuSpec | None:
    """A GPU of the size ``query`` gives with an explicit unit; None if it is not such a size."""
    size = parse_size(query)
    if size is None or size.unit is None:
        return None
    total, number, unit_name = size.bytes, size.number, size.unit
    if total <= 0:
        raise SettingsError(f"GPU size {query.strip()!r} must be positive")
    return GpuSpec(
        id=f"size-{total}", name=f"{number} {unit_name} GPU", vendor="unknown", memory_bytes=total,
        source=f"given as a size: {number} {unit_name}, 1 {unit_name} = {UNIT_BASES[unit_name]} bytes",
        nvml_visible=False, memory_reading="given", matched_by="size", query=query, size_unit=unit_name,
    )


def _size_problem(query: str) -> str | None:
    """Why ``query`` is not a usable GPU size, when it looks like one (a number, maybe with letters)."""
    parts = split_number(query)
    if parts is None:
        return None
    number, unit = parts
    u = unit.lower()
    if u in ("", "g", "gi"):
        return (f"GPU size {query.strip()!r} is ambiguous: write {number}GB ({number} x 10**9 bytes) "
                f"or {number}GiB ({number} x 2**30 bytes)")
    if u in ("m", "t", "mi", "ti"):
        return f"GPU size {query.strip()!r} is ambiguous: write GB/MB/TB (decimal) or GiB/MiB/TiB (binary)"
    return None


def gpu_spec(query: str) -> GpuSpec:
    """The GPU ``query`` names (an id, name, alias or ambiguous name) or a GPU of the size it gives.

    See the module docstring for the rules. Raises :class:`~vramwise.SettingsError` for an
    unknown name (listing the closest catalog names) or an ambiguous size such as ``24g``.
    """
    if not isinstance(query, str) or not query.strip():
        raise SettingsError(f"GPU must be a non-empty name or size, not {query!r}")
    size = _parse_size(query)
    if size is not None:
        return size
    cat = _catalog()
    key = normalize(query)
    hit = cat.index.get(key)
    if hit is not None:
        gpu_id, kind = hit
        return _replace(cat.by_id[gpu_id], matched_by=kind, query=query)
    amb = cat.ambiguous.get(key)
    if amb is not None:
        default, candidates, reason, name = amb
        others = tuple(c for c in candidates if c != default)
        note = f"{name!r} matches {', '.join(candidates)}; chose {default}: {reason}"
        return _replace(cat.by_id[default], matched_by="ambiguous", query=query, alternatives=others, note=note)
    problem = _size_problem(query)
    if problem is not None:
        raise SettingsError(problem)
    close = difflib.get_close_matches(key, list(cat.display), n=5, cutoff=0.6)
    names = ", ".join(dict.fromkeys(cat.display[c] for c in close))
    hint = f"; did you mean: {names}?" if names else ""
    raise SettingsError(
        f"unknown GPU {query!r}{hint} (a name from `vramwise.list_gpus()`, or a size such as 24GiB or 80GB)"
    )


def _replace(spec: GpuSpec, **changes) -> GpuSpec:
    from dataclasses import replace

    if spec.note and "note" in changes:
        changes["note"] = f"{changes['note']}. {spec.note}"
    return replace(spec, **changes)
