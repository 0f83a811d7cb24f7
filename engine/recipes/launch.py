"""Launch lines as input: the command a run is started with, read into world size, nodes and strategy.

``torchrun --nproc_per_node 8 train.py --deepspeed ds.json``, ``tune run --nproc_per_node 8
lora_finetune_distributed --config llama3_1/70B_lora``, ``accelerate launch --num_processes 4 --use_fsdp
train.py``... The launchers' grammars are data (``frameworks/launchers.yaml``, schema ``launchers-1``):
the words that start each one, its flags and what each gives. :func:`read_launch` applies them and returns
a :class:`LaunchLine`: the figures it states (each with the words it came from), the strategy, the files it
names (read as parts of the recipe where files may be read) and notes on what it leaves unstated. A count
the line does not give (``--nproc_per_node gpu`` without ``CUDA_VISIBLE_DEVICES``, no count at all) is left
unset, never guessed. Nothing here knows a launcher by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import PurePath
from types import MappingProxyType
from typing import Mapping

from vramwise.errors import FileFormatError, RecipeError
from vramwise.estimation.recipe import Origin
from vramwise.rules.datafiles import load_data_file, package_files, read_data_text

__all__ = ["LaunchLine", "Launcher", "Launchers", "read_launch", "bundled_launchers", "load_launchers",
           "launch_parts", "header_launch", "MAX_LAUNCH_CHARS", "LAUNCH_ORIGIN"]

#: The longest launch line read (characters).
MAX_LAUNCH_CHARS = 10_000
#: The kind of :class:`~vramwise.estimation.recipe.Origin` a value taken from a launch line has.
LAUNCH_ORIGIN = "launch line"
SCHEMA = "launchers-1.schema.json"
LAUNCHERS_FILE = "launchers.yaml"
#: The words a line may hold at most (a bound on the work a pasted line makes).
MAX_WORDS = 2_000
_ENV = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_OVERRIDE = re.compile(r"^~?[A-Za-z_][A-Za-z0-9_.\[\]-]*=")
_RECIPE_FILE = re.compile(r"\.(ya?ml|json)$", re.I)
_PYTHON = re.compile(r"^python[0-9.]*$")
_READ_ORDER = ("config", "accelerate", "deepspeed")  # the main recipe first, then the parts that complete it


# -- the grammar --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Flag:
    """One flag of a launcher (see the schema's ``flag``)."""

    names: tuple
    value: bool
    gives: str | None
    role: str | None
    config_names: bool
    words: Mapping[str, str]
    mapping: Mapping[str, str] | None
    strategy: str | None
    rank: int  # its place among the launcher's flags: of two strategies named, the earlier-listed flag's wins


@dataclass(frozen=True)
class Launcher:
    """One launcher, compiled from its entry of ``launchers.yaml``."""

    name: str
    framework: str
    description: str
    source: str
    programs: tuple  # of word tuples
    flags: Mapping[str, Flag]  # by spelling, before the entry (inherited flags included)
    after: Mapping[str, Flag]  # by spelling, after the entry
    environment: Mapping[str, str | None]
    entry: str
    positional_files: bool
    overrides: bool
    entry_rules: tuple  # ((regex, strategy, world_size or None, source), ...)
    nodes_default: int
    nodes_source: str
    missing_processes: str
    when_many: tuple | None  # (strategy, source)
    strategy_from: str | None
    format: str | None = None  # the recipe format of the stack it runs (its default profile is the line's profile)
    passes_to: tuple | None = None  # ({value: launcher name or None}, default value, source): see the schema

    def program_texts(self) -> list[str]:
        return [" ".join(p) for p in self.programs]


@dataclass(frozen=True)
class Launchers:
    """The launchers of one ``launchers.yaml``."""

    launchers: tuple
    environment: Mapping[str, str | None]
    file: str

    def match(self, words: list) -> tuple[Launcher | None, int]:
        """The launcher whose program words start ``words`` (the longest match) and how many words it took."""
        norm = [_program_word(w) for w in words[:4]]
        best, size = None, 0
        for launcher in self.launchers:
            for program in launcher.programs:
                if len(program) > size and tuple(norm[:len(program)]) == program:
                    best, size = launcher, len(program)
        return best, size

    def programs(self) -> list[str]:
        return [t for launcher in self.launchers for t in launcher.program_texts()]

    def named(self, name: str) -> Launcher | None:
        return next((launcher for launcher in self.launchers if launcher.name == name), None)


def _program_word(word: str) -> str:
    """A program word as the grammar writes it: a path's last part; python3.11 (or a path to it) is python."""
    name = PurePath(word).name if "/" in word or "\\" in word else word
    return "python" if _PYTHON.match(name) else name


def _flag(spec: Mapping, rank: int) -> Flag:
    return Flag(names=tuple(spec["names"]), value=bool(spec["value"]), gives=spec.get("gives"), role=spec.get("role"),
                config_names=bool(spec.get("config_names", False)),
                words=MappingProxyType(dict(spec.get("words", {}))),
                mapping=MappingProxyType(dict(spec["map"])) if "map" in spec else None,
                strategy=spec.get("strategy"), rank=rank)


def _by_name(flags: list) -> dict:
    out: dict = {}
    for f in flags:
        for n in f.names:
            out.setdefault(n, f)
    return out


def _env(specs) -> dict:
    return {e["name"]: e.get("gives") for e in specs or ()}


def compile_launchers(df) -> Launchers:
    """The launchers of a loaded ``launchers.yaml``; :class:`FileFormatError` names each problem's file:line:col
    and JSON path (an unknown launcher inherited, a name given twice, a regular expression that does not compile)."""
    data = df.data
    specs = data["launchers"]
    problems: list = []
    names = {}
    for i, spec in enumerate(specs):
        if spec["name"] in names:
            problems.append(df.problem(("launchers", i, "name"), f"launcher {spec['name']!r} is defined twice"))
        names[spec["name"]] = spec
    out = []
    for i, spec in enumerate(specs):
        own = [_flag(f, r) for r, f in enumerate(spec.get("flags", ()))]
        inherited: list = []
        parent = spec.get("inherit")
        if parent is not None:
            if parent not in names or parent == spec["name"]:
                problems.append(df.problem(("launchers", i, "inherit"), f"unknown launcher {parent!r} "
                                                                         f"(launchers: {', '.join(names)})"))
            else:
                inherited = [_flag(f, len(own) + r) for r, f in enumerate(names[parent].get("flags", ()))]
        before = own + inherited
        after = [_flag(f, r) for r, f in enumerate(spec.get("entry_flags", ()))]
        if spec.get("flags_anywhere"):
            after = after + [replace(f, rank=len(after) + f.rank) for f in before]
        rules = []
        for j, rule in enumerate(spec.get("entry_rules", ())):
            try:
                regex = re.compile(rule["matches"])
            except re.error as e:
                problems.append(df.problem(("launchers", i, "entry_rules", j, "matches"), f"not a regular expression: {e}"))
                continue
            rules.append((regex, rule["strategy"], rule.get("world_size"), rule["source"]))
        many = spec.get("when_many")
        passes = spec.get("passes_to")
        if passes is not None:
            for value, name in passes["launchers"].items():
                if name is not None and (name not in names or name == spec["name"]):
                    problems.append(df.problem(("launchers", i, "passes_to", "launchers", value),
                                               f"unknown launcher {name!r} (launchers: {', '.join(names)})"))
            if passes["default"] not in passes["launchers"]:
                problems.append(df.problem(("launchers", i, "passes_to", "default"),
                                           f"{passes['default']!r} is not a key of passes_to.launchers"))
        out.append(Launcher(
            name=spec["name"], framework=spec["framework"], description=spec["description"], source=spec["source"],
            programs=tuple(tuple(p) for p in spec["programs"]), flags=MappingProxyType(_by_name(before)),
            after=MappingProxyType(_by_name(after)), environment=MappingProxyType(_env(spec.get("environment"))),
            entry=spec["entry"], positional_files=bool(spec.get("positional_files", False)),
            overrides=bool(spec.get("overrides", False)), entry_rules=tuple(rules),
            nodes_default=spec["defaults"]["nodes"], nodes_source=spec["defaults"]["source"],
            missing_processes=spec["missing_processes"],
            when_many=(many["strategy"], many["source"]) if many else None, strategy_from=spec.get("strategy_from"),
            format=spec.get("format"),
            passes_to=(MappingProxyType(dict(passes["launchers"])), passes["default"], passes["source"])
            if passes else None))
    if problems:
        raise FileFormatError(problems)
    return Launchers(tuple(out), MappingProxyType(_env(data.get("environment"))), df.path)


def load_launchers(path=None, *, validate: bool | None = None) -> Launchers:
    """The launchers of ``path`` (a ``launchers.yaml``; default: the bundled one). A file from elsewhere is
    validated against the schema; the bundled one is validated by the test suite."""
    if path is None:
        item, shown = package_files("vramwise.frameworks").joinpath(LAUNCHERS_FILE), f"frameworks/{LAUNCHERS_FILE}"
        validate = bool(validate)
    else:
        from pathlib import Path

        item, shown = Path(path), str(path)
        validate = True if validate is None else validate
    return compile_launchers(load_data_file(read_data_text(item, shown), shown, SCHEMA, validate=validate))


@lru_cache(maxsize=1)
def bundled_launchers() -> Launchers:
    """The bundled launchers (``frameworks/launchers.yaml``), read once."""
    return load_launchers()


# -- the line -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchLine:
    """A launch line read by :func:`read_launch`.

    ``processes_per_node``, ``nodes`` and ``world_size`` are None where the line does not state them;
    ``sources`` gives, for each figure stated (and ``strategy``), the words it came from; ``implied`` names the
    figures that are the launcher's behaviour rather than a word of the line (torchrun on several processes
    is data parallel unless something names another strategy): a recipe's own keys win over those.
    ``files`` are ``(role, path)`` pairs (config, accelerate, deepspeed); ``config_names`` the configs named
    that are shipped with the framework rather than given as files; ``overrides`` the ``key=value`` words
    after the recipe (recorded, not applied); ``notes`` what the line leaves unstated.
    """

    text: str
    launcher: str
    framework: str
    program: str
    processes_per_node: int | None = None
    nodes: int | None = None
    world_size: int | None = None
    strategy: str | None = None
    files: tuple = ()
    config_names: tuple = ()
    overrides: tuple = ()
    entry: str | None = None
    runs: str | None = None  # the launcher of the module it runs (accelerate launch -m axolotl.cli.train: axolotl)
    format: str | None = None  # the recipe format of the stack the launcher runs (tune run: torchtune), if it says
    profile: str | None = None  # that format's default profile
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    implied: frozenset = frozenset()
    notes: tuple = ()

    def origin(self, figure: str) -> Origin:
        """Where ``figure`` came from: an :class:`Origin` of kind ``launch line`` whose key is the words."""
        return Origin(LAUNCH_ORIGIN, key=self.sources.get(figure), source=self.program)

    def settings(self) -> dict:
        """The vramwise settings the line states: name -> (value, origin, implied). The processes per node are
        the GPUs per machine (``gpus_per_node``)."""
        out = {}
        if self.strategy is not None:
            out["strategy"] = (self.strategy, self.origin("strategy"), "strategy" in self.implied)
        if self.world_size is not None:
            out["world_size"] = (self.world_size, self.origin("world_size"), "world_size" in self.implied)
        if self.processes_per_node is not None:
            out["gpus_per_node"] = (self.processes_per_node, self.origin("processes_per_node"), False)
        return out

    def to_dict(self) -> dict:
        """Plain data, suitable for JSON."""
        return {"launcher": self.launcher, "framework": self.framework, "program": self.program,
                "processes_per_node": self.processes_per_node, "nodes": self.nodes, "world_size": self.world_size,
                "strategy": self.strategy, "profile": self.profile, "files": [{"role": r, "path": p} for r, p in self.files],
                "config_names": list(self.config_names), "overrides": [{"key": k, "value": v} for k, v in self.overrides],
                "entry": self.entry, "runs": self.runs, "sources": dict(self.sources),
                "implied": sorted(self.implied), "notes": list(self.notes)}


def _position(text: str, index: int) -> str:
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return f"line {line}, column {column}" if "\n" in text else f"column {column}"


def _scan(text: str) -> tuple[str, int | None]:
    """The text without its comments (``#`` at the start of a word, outside quotes, to the end of its line) and the
    index of a quote the shell would leave open (None), by POSIX rules: backslash escapes outside single quotes."""
    out: list = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            out.append(text[i:i + 2])
            i += 2
            continue
        if c in "'\"":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if (c == '"' and text[j] == "\\") else 1
            if j >= n:
                return "".join(out), i
            out.append(text[i:j + 1])
            i = j + 1
            continue
        if c == "#" and (i == 0 or text[i - 1].isspace()):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        out.append(c)
        i += 1
    return "".join(out), None


def _words(text: str) -> list[str]:
    """The line's words as a POSIX shell splits them: backslash-newline continues a line, newlines separate words
    like spaces, ``#`` starts a comment; an unbalanced quote is a RecipeError naming its column."""
    joined = re.sub(r"\\\r?\n", lambda m: " " * len(m.group()), text)  # same length: columns stay
    stripped = joined.rstrip()
    if stripped.endswith("\\") and not stripped.endswith("\\\\"):
        joined = stripped[:-1]  # a continuation with nothing after it
    cleaned, open_at = _scan(joined)
    if open_at is not None:
        raise RecipeError(f"launch line: {_position(text, open_at)}: unbalanced {joined[open_at]} quote")
    import shlex  # here: a command without --launch does not pay for it

    try:
        words = shlex.split(cleaned, posix=True)
    except ValueError as e:  # pragma: no cover - _scan finds what shlex refuses
        raise RecipeError(f"launch line: {e}") from None
    if len(words) > MAX_WORDS:
        raise RecipeError(f"launch line: {len(words):,} words; a launch line holds at most {MAX_WORDS:,}")
    return words


class _State:
    """What the words read so far give."""

    def __init__(self):
        self.counts: dict = {}  # figure -> (value: int | "visible" | "not_stated", words)
        self.strategies: list = []  # (rank, strategy, words)
        self.files: list = []
        self.config_names: list = []
        self.overrides: list = []
        self.notes: list = []
        self.entry: str | None = None
        self.entry_rule: tuple | None = None
        self.runs: Launcher | None = None
        self.hostfile: str | None = None
        self.elastic: str | None = None
        self.visible: tuple | None = None  # (count, words)
        self.launcher_named: tuple | None = None  # (value, words) of a flag that gives the launcher passed to
        self.passed: Launcher | None = None  # the launcher the words after passes_to's separator went to


def _clip(words: str, limit: int = 80) -> str:
    """Words as a message shows them: on one line, at most ``limit`` characters."""
    one = " ".join(words.split()) if any(c in words for c in "\n\r\t\v\f") else words
    one = "".join(c if c.isprintable() else "?" for c in one)
    return one if len(one) <= limit else one[:limit - 3] + "..."


def _whole(value: str, words: str, what: str, allowed: tuple = ()) -> int:
    text = value.strip()
    if re.fullmatch(r"[0-9]{1,7}", text) and int(text) >= 1:
        return int(text)
    also = f" (or {', '.join(allowed)})" if allowed else ""
    raise RecipeError(f"launch line: {words}: the number of {what} must be a whole number from 1{also}, got {value!r}")


def _apply_flag(flag: Flag, value: str | None, words: str, state: _State, first: bool) -> None:
    gives = flag.gives
    if gives in ("processes_per_node", "world_size"):
        if value in flag.words:
            state.counts[gives] = (flag.words[value], words)
            return
        what = "processes per node" if gives == "processes_per_node" else "processes"
        count = _whole(value, words, what, tuple(flag.words))
        if first or gives not in state.counts:
            state.counts[gives] = (count, words)
    elif gives == "nodes":
        low, sep, high = value.partition(":")
        if sep:
            a, b = _whole(low, words, "nodes"), _whole(high, words, "nodes")
            if a == b:
                state.counts["nodes"] = (a, words)
            else:
                state.elastic = words
        else:
            state.counts["nodes"] = (_whole(value, words, "nodes"), words)
    elif gives == "strategy":
        if flag.mapping is not None:
            strategy = flag.mapping.get(value)
            if strategy is None:
                state.notes.append(f"{words}: not a value vramwise knows ({', '.join(flag.mapping)}): no strategy "
                                   "taken from it")
                return
        else:
            strategy = flag.strategy
        state.strategies.append((flag.rank, strategy, words))
    elif gives == "file":
        if flag.config_names and not _RECIPE_FILE.search(value):
            state.config_names.append(value)
        else:
            state.files.append((flag.role, value))
    elif gives == "hostfile":
        state.hostfile = words
    elif gives == "launcher":
        state.launcher_named = (value, words)


def _parse(launcher: Launcher, rest: list, state: _State, launchers: Launchers, first: bool) -> None:
    """Read the words after ``launcher``'s program words into ``state`` (``first``: the outermost launcher,
    whose figures win over those of a launcher it runs)."""
    entry_seen = False
    module = False
    j = 0
    while j < len(rest):
        w = rest[j]
        known = launcher.after if entry_seen else launcher.flags
        if w == "--" and not entry_seen:
            j += 1
            continue
        if w == "--" and first and launcher.passes_to is not None:
            _pass_on(launcher, rest[j + 1:], state, launchers)
            return
        if w.startswith("-") and len(w) > 1 and not re.fullmatch(r"-[0-9.]+", w):
            name, eq, inline = w.partition("=") if w.startswith("--") else (w, "", "")
            flag = known.get(name)
            if flag is None:  # a flag vramwise does not read: skipped, with the value that follows it
                takes = not eq and j + 1 < len(rest) and not rest[j + 1].startswith("-") \
                    and not (entry_seen and (launcher.overrides and _OVERRIDE.match(rest[j + 1])))
                if not entry_seen:
                    shown = _clip(f"{w} {rest[j + 1]}" if takes else w)
                    state.notes.append(f"{shown}: a flag of {' '.join(launcher.programs[0])} vramwise does not read: "
                                       "skipped")
                j += 2 if takes else 1
                continue
            if flag.value and flag.gives == "file" and not eq and (j + 1 >= len(rest) or rest[j + 1].startswith("-")):
                j += 1  # DeepSpeed's own --deepspeed is a switch beside --deepspeed_config FILE: no file here
                continue
            if flag.value:
                if eq:
                    value = inline
                elif j + 1 < len(rest):
                    value = rest[j + 1]
                    j += 1
                else:
                    raise RecipeError(f"launch line: {w} needs a value")
                shown = _clip(f"{name}={value}" if eq else f"{name} {value}")
            else:
                if eq:
                    raise RecipeError(f"launch line: {name} takes no value, got {w!r}")
                value, shown = None, name
            j += 1
            if flag.gives == "module":
                module = True
                continue
            _apply_flag(flag, value, shown, state, first)
            continue
        if not entry_seen:
            entry_seen = True
            j += 1
            if module:
                inner, size = launchers.match(["python", "-m", w])
                if inner is not None and size == 3:
                    state.runs = inner
                    _parse(inner, rest[j:], state, launchers, False)
                    return
            if first or state.entry is None:
                state.entry = w
            _read_entry(launcher, w, state)
            continue
        if launcher.overrides and _OVERRIDE.match(w):
            key, _, value = w.partition("=")
            state.overrides.append((key, value))
        elif launcher.positional_files and _RECIPE_FILE.search(w):
            state.files.append(("config", w))
        j += 1


def _pass_on(launcher: Launcher, rest: list, state: _State, launchers: Launchers) -> None:
    """The words after ``launcher``'s separator, read with the flags of the launcher it runs under (the one its
    launcher flag names, else its default)."""
    targets, default, _ = launcher.passes_to
    value, words = state.launcher_named or (default, None)
    program = " ".join(launcher.programs[0])
    if value not in targets:
        state.notes.append(f"{words}: not a launcher {program} runs under ({', '.join(targets)}): the words after "
                           "-- are not read")
        return
    inner = launchers.named(targets[value]) if targets[value] is not None else None
    if inner is None:
        if rest:
            state.notes.append(f"{words or value}: {program} runs without a launcher: the words after -- are not read")
        return
    state.passed = inner
    _parse(inner, rest, state, launchers, False)


def _read_entry(launcher: Launcher, entry: str, state: _State) -> None:
    if launcher.entry == "config":
        state.files.append(("config", entry))
    name = PurePath(entry).name
    for regex, strategy, world_size, source in launcher.entry_rules:
        if regex.search(name):
            state.entry_rule = (strategy, world_size, _clip(entry), source)
            break


def read_launch(text: str, launchers: Launchers | None = None) -> LaunchLine:
    """Read a launch line (the command a training run is started with, as pasted: several lines joined by
    backslashes, environment prefixes such as ``CUDA_VISIBLE_DEVICES=0,1``).

    Raises :class:`RecipeError` in one line for a line that cannot be read: an unknown program (the message
    lists the launchers known), an unbalanced quote (its column), a count that is not a whole number, a line
    over :data:`MAX_LAUNCH_CHARS` characters.
    """
    if not isinstance(text, str):
        raise RecipeError(f"launch line: the command's text, got a {type(text).__name__}")
    if len(text) > MAX_LAUNCH_CHARS:
        raise RecipeError(f"launch line: {len(text):,} characters; a launch line holds at most {MAX_LAUNCH_CHARS:,}")
    launchers = launchers or bundled_launchers()
    words = _words(text)
    i = 0
    if words[:1] == ["$"]:  # a shell prompt pasted with the command
        i = 1
    env: list = []
    while i < len(words):
        m = _ENV.match(words[i])
        if m is not None:
            env.append((m.group(1), m.group(2), words[i]))
            i += 1
        elif words[i] == "env":
            i += 1
        else:
            break
    if i >= len(words):
        raise RecipeError("launch line: no command in it (give the command a run is started with, such as "
                          "torchrun --nproc_per_node 8 train.py)")
    launcher, size = launchers.match(words[i:])
    if launcher is None:
        raise RecipeError(f"launch line: {words[i][:60]!r} is not a launcher vramwise reads (launchers: "
                          f"{', '.join(launchers.programs())})")
    state = _State()
    for name, value, word in env:
        word = _clip(word)
        gives = launcher.environment.get(name, launchers.environment.get(name))
        if gives == "visible_devices":
            ids = [x for x in value.split(",") if x.strip()]
            state.visible = (len(ids), word)
        elif gives in ("processes_per_node", "nodes"):
            what = "processes per node" if gives == "processes_per_node" else "nodes"
            state.counts[gives] = (_whole(value, word, what), word)
    _parse(launcher, words[i + size:], state, launchers, True)
    return _finish(text, launcher, " ".join(words[i:i + size]), state)


def _finish(text: str, launcher: Launcher, program: str, state: _State) -> LaunchLine:
    sources: dict = {}
    many_of_passed = state.passed.when_many if state.passed is not None else None
    notes = list(state.notes)
    implied: set = set()
    ppn, ppn_words = state.counts.get("processes_per_node", (None, None))
    if ppn is None and "world_size" not in state.counts and launcher.missing_processes == "visible":
        ppn, ppn_words = "visible", None
    if ppn == "visible":
        if state.visible is not None and state.visible[0] >= 1:
            ppn, ppn_words = state.visible[0], (f"{ppn_words} and " if ppn_words else "") + state.visible[1]
        else:
            what = f"{ppn_words} starts" if ppn_words else f"{program} starts"
            notes.append(f"{what} one process per visible GPU, and the line does not say how many are visible "
                         "(CUDA_VISIBLE_DEVICES): the line states no world size")
            ppn = None
    elif ppn == "not_stated":
        notes.append(f"{ppn_words} does not say how many processes: the line states no world size")
        ppn = None
    elif ppn is None and "world_size" not in state.counts and not (state.entry_rule and state.entry_rule[1]):
        notes.append(f"the line does not say how many processes {program} starts: the line states no world size")
    nodes, nodes_words = state.counts.get("nodes", (None, None))
    if nodes is None:
        if state.elastic is not None:
            notes.append(f"{state.elastic}: an elastic range of nodes: the line states no world size")
        elif state.hostfile is not None:
            notes.append(f"{state.hostfile}: the nodes are the hostfile's: the line states no world size")
        else:
            nodes = launcher.nodes_default
    world, world_words = state.counts.get("world_size", (None, None))
    if world is not None:
        if world == "visible" or world == "not_stated":
            notes.append(f"{world_words} does not say how many processes: the line states no world size")
            world = None
        elif nodes is not None and ppn is None and world % nodes == 0:
            ppn, ppn_words = world // nodes, world_words
    elif ppn is not None and nodes is not None:
        world = ppn * nodes
        world_words = ppn_words if nodes_words is None else f"{ppn_words} and {nodes_words}"
    if ppn is not None:
        sources["processes_per_node"] = ppn_words
    if nodes is not None:
        sources["nodes"] = nodes_words or f"{program}'s default of {nodes} node{'s' if nodes > 1 else ''}"
    strategy = None
    if state.strategies:
        _, strategy, words = min(state.strategies, key=lambda t: t[0])
        sources["strategy"] = words
    elif state.entry_rule is not None:
        strategy, rule_world, entry, _ = state.entry_rule
        sources["strategy"] = entry
        if rule_world is not None:
            if world is None:
                world, world_words = rule_world, entry
            elif world != rule_world:
                notes.append(f"{entry} runs on {rule_world} device{'s' if rule_world > 1 else ''}, but the line starts "
                             f"{world} processes")
    elif launcher.strategy_from is not None or any(role == "deepspeed" for role, _ in state.files):
        strategy = "deepspeed_config"  # a DeepSpeed config named: its ZeRO stage, never the launcher's default
    accelerate = [_clip(p) for role, p in state.files if role == "accelerate"]
    if strategy == "deepspeed_config":
        named = [_clip(p) for role, p in state.files if role == "deepspeed"]
        if named:
            notes.append(f"the ZeRO stage is the DeepSpeed config's ({', '.join(named)})")
        elif accelerate:
            notes.append(f"the ZeRO stage is the accelerate config's ({', '.join(accelerate)})")
        else:
            notes.append("the line names no DeepSpeed config (--deepspeed FILE): the ZeRO stage is not stated")
        strategy = None
        sources.pop("strategy", None)
    elif strategy is None and accelerate:
        notes.append(f"the strategy is the accelerate config's ({', '.join(accelerate)})")
    elif strategy is None and world is not None and world > 1 and (launcher.when_many or many_of_passed) is not None:
        strategy = (launcher.when_many or many_of_passed)[0]
        sources["strategy"] = f"{program} on {world} processes"
        implied.add("strategy")
    if strategy is None and world is not None and world > 1:
        notes.append(f"the line states no strategy: its world size {world} applies with the strategy a recipe "
                     "part or a setting gives")
    if world is not None:
        sources["world_size"] = world_words
    runs = state.runs
    stack = runs if runs is not None and runs.format is not None else launcher
    profile = _stack_profile(stack)
    if profile is not None:
        sources["profile"] = profile[1]
        implied.add("profile")
    return LaunchLine(
        text=text, launcher=launcher.name, framework=launcher.framework, program=program,
        processes_per_node=ppn, nodes=nodes, world_size=world, strategy=strategy,
        files=tuple(sorted(dict.fromkeys(state.files), key=lambda f: _READ_ORDER.index(f[0]))),
        config_names=tuple(dict.fromkeys(state.config_names)), overrides=tuple(state.overrides), entry=state.entry,
        runs=runs.name if runs is not None else None, format=stack.format,
        profile=profile[0] if profile is not None else None,
        sources=MappingProxyType(sources),
        implied=frozenset(implied), notes=tuple(dict.fromkeys(notes)))


def _stack_profile(launcher: Launcher) -> tuple[str, str] | None:
    """(profile, why) of the stack ``launcher`` runs: the default profile of its recipe format (the rule of the
    format's ``profile`` marked default, with no condition), or None where the launcher names no format."""
    if launcher.format is None:
        return None
    from vramwise.recipes.bundled import bundled_formats

    fmt = bundled_formats().get(launcher.format)
    for rule in fmt.profile:
        if rule.default and not rule.when and isinstance(rule.value, str):
            return rule.value, f"{launcher.name} runs {fmt.framework}'s stack ({fmt.file}: profile)"
    return None


# -- the launch line a recipe's header gives ----------------------------------------------------

#: The comment lines at the head of a file that are searched for its launch line.
MAX_HEADER_LINES = 200


def header_launch(text: str | None, fmt, file: str | None):
    """The launch line the leading comment of ``text`` (a recipe of format ``fmt``) gives: the first comment line
    that starts with the program words of the format's ``header_launch`` launcher, read by :func:`read_launch`,
    its figures' origins naming the file's line and all of them only implied (the recipe's own keys win). None where
    the format has no such rule or the header holds no such line (a line that does not read is skipped: it is only
    a comment)."""
    if fmt.header_launch is None or not text:
        return None
    launchers = bundled_launchers()
    launcher = next((x for x in launchers.launchers if x.name == fmt.header_launch[0]), None)
    if launcher is None:
        raise RecipeError(f"{fmt.file}: header_launch names launcher {fmt.header_launch[0]!r}, which launchers.yaml "
                          "does not define")
    programs = launcher.program_texts()
    for number, line in enumerate(text.splitlines()[:MAX_HEADER_LINES], 1):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break  # the header ends at the first key
        words = stripped.lstrip("#").strip()
        if not any(words == p or words.startswith(p + " ") for p in programs):
            continue
        try:
            launch = read_launch(words, launchers)
        except RecipeError:  # a comment that does not read as a launch line is only a comment
            continue
        where = f"{file or 'the recipe'}:{number}"
        sources = {k: f"{v}, in the header comment of {where}" for k, v in launch.sources.items()}
        # the config's own keys (fsdp_cpu_offload: FSDP) win over its comment: every figure is only implied
        return replace(launch, sources=MappingProxyType(sources), config_names=(), files=(), overrides=(),
                       implied=frozenset(launch.settings()) | {"processes_per_node", "profile"},
                       notes=(f"the launch line is the one the header comment of {where} gives ({words[:120]}); "
                              "a launch line given (--launch) or a setting given wins over it",) + launch.notes)
    return None


# -- the files it names -------------------------------------------------------------------------

def launch_parts(launch: LaunchLine, *, read_files: bool, given_names: frozenset = frozenset(),
                 recipe_flag: str = "--recipe FILE", model_field: str = "the model argument",
                 recipe_given: bool = False, shipped_read: bool = False) -> tuple[list, tuple]:
    """The files of ``launch`` to read as parts of the recipe (the main recipe first) and the notes on those
    that are not read: a file that does not exist, any file where files are not read (``read_files`` false:
    unless a part of that name was given, ``given_names``), a config named but shipped with its framework.
    ``shipped_read``: the configs the line names were read from the framework's release as shipped with vramwise
    (:func:`vramwise.recipes.shipped.launch_shipped`), so they are not noted.
    ``recipe_given``: the recipe is given otherwise (``--recipe``), which wins: no file of the line is read."""
    from pathlib import Path

    paths: list = []
    notes: list = []
    if recipe_given:
        named = [p for _, p in launch.files] + list(launch.config_names)
        if named:
            notes.append(f"the launch line's {', '.join(repr(p) for p in named)} not read: the recipe given is read "
                         "instead")
        return paths, tuple(notes) + _override_note(launch)
    for role, path in launch.files:
        if not read_files:
            if PurePath(path).name not in given_names:
                notes.append(f"the launch line names the {role} file {path!r}, which is not read here: give its "
                             "text as a part of the recipe")
            continue
        p = Path(path).expanduser()
        if p.is_file():
            paths.append(str(p))
        else:
            notes.append(f"the launch line names the {role} file {path!r}, which does not exist here: not read")
    for name in () if shipped_read else launch.config_names:
        notes.append(f"the launch line names the {launch.framework} config {name!r}, which is shipped with "
                     f"{launch.framework}, not with vramwise: the model and settings must come from {recipe_flag} "
                     f"(a copy of the config) or {model_field}")
    return paths, tuple(notes) + _override_note(launch)


def _override_note(launch: LaunchLine) -> tuple:
    if not launch.overrides:
        return ()
    shown = " ".join(f"{k}={v}" for k, v in launch.overrides[:8])
    return (f"the launch line's overrides ({shown}{' ...' if len(launch.overrides) > 8 else ''}) are not applied "
            "to the recipe: give them as settings",)


def with_notes(launch: LaunchLine, notes: tuple) -> LaunchLine:
    """``launch`` with ``notes`` added."""
    return replace(launch, notes=tuple(dict.fromkeys(launch.notes + tuple(notes))))
