"""Reading a training recipe: load its parts, recognise each format, apply the format's rules.

A recipe is one file or mapping (the main part) plus the files it names (``deepspeed:``) and any
further parts the caller gives (an accelerate config, an adapter_config.json). Each setting takes
the first value found in this order: the caller's overrides; the parts' own keys (main part first,
then the parts it names, then the further parts); the frameworks' defaults (same order); vramwise's
default. :class:`~vramwise.estimation.recipe.Origin` records which.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from vramwise.rules.datafiles import DataFile, MAX_FILE_BYTES, compose_yaml, iter_nodes
from vramwise.errors import RecipeError, SettingsError, VramwiseError
from vramwise.estimation.recipe import Origin, Recipe
from vramwise.profiles.settings import DEFAULT_PROFILE, SETTINGS
from vramwise.recipes.bundled import bundled_formats
from vramwise.recipes.formats import MISSING, Format, Formats, Rule, canon, lookup, version_tuple

__all__ = ["read_recipe", "bundled_formats", "RecipeText", "MAX_PARTS", "MAX_WARNED_KEYS"]

#: At most this many parts (files and inline mappings) make one recipe.
MAX_PARTS = 16
#: Unknown keys named one by one in the warnings before the rest are counted.
MAX_WARNED_KEYS = 20
#: YAML nodes a recipe may expand to (aliases count each time they are used).
MAX_NODES = 200_000
MAX_DEPTH = 64
_BY_NAME = {s.name: s for s in SETTINGS}
#: Names an override may set beside the settings.
_OVERRIDE_EXTRA = ("model", "profile")


@dataclass(frozen=True)
class RecipeText:
    """A recipe given as its text (an upload): ``name`` is what messages call it (its file name)."""

    text: str
    name: str = "uploaded recipe"


class _Part:
    """One part of a recipe: its data, the format it is read as, and where its keys are."""

    def __init__(self, data: Mapping, file: str | None, folder: Path | None, df: DataFile | None,
                 prefix: tuple = ()):
        self.data = data
        self.file = file
        self.folder = folder
        self.df = df
        self.prefix = prefix
        self.fmt: Format | None = None

    def line(self, key: str) -> int | None:
        """1-based line of ``key`` (a dotted path), when the part came from text."""
        if self.df is None:
            return None
        if lookup(self.data, key) is MISSING:  # a key the recipe does not have has no line
            return None
        parts = self.prefix + tuple(key.split("."))
        node = self.df.key_node(parts[:-1], parts[-1])
        if node is None:
            node = self.df.node_at(parts)
        return node.start_mark.line + 1

    def where(self, key: str) -> str:
        line = self.line(key)
        name = self.file or "<recipe mapping>"
        return f"{name}:{line}" if line is not None else name


# -- loading ------------------------------------------------------------------------------------

def _check_nodes(root: yaml.Node, path: str) -> None:
    """Bound what a recipe's YAML expands to: aliases are allowed (recipes use anchors), but every use
    counts, so an alias bomb or a self-reference stops at MAX_NODES / MAX_DEPTH."""
    for count, (node, depth) in enumerate(iter_nodes(root), 1):
        if count > MAX_NODES or depth > MAX_DEPTH:
            mark = node.start_mark
            raise RecipeError(f"{path}:{mark.line + 1}: the recipe expands to more than {MAX_NODES:,} YAML nodes "
                              f"or {MAX_DEPTH} levels")


def _parse_text(text: str, shown: str) -> tuple[Any, DataFile | None]:
    try:
        data, root = compose_yaml(text, lambda node: _check_nodes(node, shown))
        if root is None:
            raise RecipeError(f"{shown}:1: the recipe is empty")
        return data, DataFile(path=shown, data=data, root=root, text=text)
    except yaml.MarkedYAMLError as e:
        try:  # JSON that YAML does not take (tabs): the data without positions
            return json.loads(text), None
        except ValueError:
            pass
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 1
        raise RecipeError(f"{shown}:{line}: not valid YAML or JSON: {e.problem or e}") from None
    except (RecursionError, MemoryError, ValueError) as e:
        raise RecipeError(f"{shown}:1: cannot be read as YAML or JSON ({type(e).__name__})") from None


def _load_file(path: Path, shown: str, referenced_at: str | None = None) -> _Part:
    how = f"{referenced_at}: " if referenced_at else ""
    try:
        if path.is_dir():
            raise RecipeError(f"{how}{shown} is a folder, not a recipe file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise RecipeError(f"{how}{shown}: {size:,} bytes; a recipe file holds at most {MAX_FILE_BYTES:,}")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RecipeError(f"{how}{shown}: no such file") from None
    except OSError as e:
        raise RecipeError(f"{how}{shown}: cannot be read ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise RecipeError(f"{shown}:1: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    data, df = _parse_text(text, shown)
    if not isinstance(data, Mapping):
        raise RecipeError(f"{shown}:1: a recipe is a mapping of keys to values, got a {type(data).__name__}")
    return _Part(data, shown, path.resolve().parent, df)


def _load(source: Any, index: int, read_files: bool) -> _Part:
    if isinstance(source, RecipeText):
        if not isinstance(source.text, str) or len(source.text) > MAX_FILE_BYTES:
            raise RecipeError(f"{source.name}: a recipe's text of at most {MAX_FILE_BYTES:,} characters")
        data, df = _parse_text(source.text, source.name)
        if not isinstance(data, Mapping):
            raise RecipeError(f"{source.name}:1: a recipe is a mapping of keys to values, got a {type(data).__name__}")
        return _Part(data, source.name, None, df)
    if isinstance(source, (str, Path)):
        if not read_files:
            raise RecipeError(f"recipe part {index + 1}: files are not read here; give the recipe's text")
        return _load_file(Path(source), str(source))
    if isinstance(source, Mapping):
        return _Part(source, None, None, None)
    raise RecipeError(f"recipe part {index + 1}: a path or a mapping, got a {type(source).__name__}")


# -- formats ------------------------------------------------------------------------------------

def _split_framework(framework: Any, formats: Formats) -> tuple[Format | None, tuple | None, str | None]:
    if framework is None:
        return None, None, None
    if not isinstance(framework, str) or not framework.strip():
        raise SettingsError(f"framework must be a format name such as axolotl or torchtune@0.6.1, got {framework!r}")
    name, _, version = framework.strip().lower().partition("@")
    fmt = formats.get(name)
    if not version:
        return fmt, None, None
    if not re.fullmatch(r"\d+(\.\d+)*", version):
        raise SettingsError(f"framework version must be numbers and dots (torchtune@0.6.1), got {version!r}")
    release = fmt.release(version)
    if release is None:
        known = ", ".join(r.version for r in fmt.known_releases())
        raise SettingsError(f"{fmt.framework} {version} is not a release the {fmt.name} format knows "
                            f"(releases: {known}; the newest is read when none is named)")
    return fmt, release.key, release.version


def _read_under(part: _Part, forced: tuple | None, warnings: list) -> tuple:
    """The release a part is read under and the release signals that chose it: the one framework= named for the
    main part (a warning where the recipe's keys say it was written for other releases), else the newest of the
    releases its keys allow (``framework.release_signals``), else its format's newest (a warning where the
    keys allow none)."""
    fmt = part.fmt
    signals = fmt.signals_of(part.data)
    shown = part.file or "the recipe"
    if forced is not None:
        against = [s for s in signals if not s.allows(forced)]
        if against:
            warnings.append(f"{shown} is read under {fmt.framework} {'.'.join(map(str, forced))} as named, but its "
                            f"keys say another release: " + "; ".join(s.says() for s in against))
        return forced, ()
    if not signals:
        return fmt.newest.key, ()
    allowed = fmt.candidates(signals)
    if not allowed:
        warnings.append(f"{shown}: its keys allow no release of {fmt.framework} that vramwise knows ("
                        + "; ".join(s.says() for s in signals) + f"): read under the newest, {fmt.newest.version}")
        return fmt.newest.key, ()
    chosen = allowed[-1]
    # only the signals that ruled out a newer release chose it; the others agree with the newest
    deciding = tuple(s for s in signals if not s.allows(fmt.newest.key)) if chosen is not fmt.newest else signals
    return chosen.key, deciding


def _detect(part: _Part, formats: Formats) -> Format:
    scored = sorted(((f.score(part.data), f.name, f) for f in formats), key=lambda t: (-t[0], t[1]))
    shown = part.file or "the recipe mapping"
    if not scored or scored[0][0] == 0:
        raise RecipeError(f"{shown}:1: not a recipe of a format vramwise reads (formats: {', '.join(formats.names())}); "
                          "if it is one, name it (--framework, or framework=)")
    if len(scored) > 1 and scored[1][0] == scored[0][0]:
        raise RecipeError(f"{shown}:1: reads as {scored[0][1]} and as {scored[1][1]} alike: name the format "
                          "(--framework, or framework=)")
    return scored[0][2]


def _references(part: _Part, formats: Formats, out: list, seen: set, depth: int, read_files: bool = True,
                 warnings: list | None = None, given_names: frozenset = frozenset()) -> None:
    """Add the parts ``part`` names (read relative to its folder). Without ``read_files``, a file named but
    not read is a warning, unless a part of that file name was given beside it."""
    for key, target, _ in part.fmt.references:
        raw = lookup(part.data, key)
        if raw is MISSING or raw is None or raw is False or raw == "":
            continue
        if len(out) >= MAX_PARTS:
            raise RecipeError(f"{part.where(key)}: {key}: a recipe has at most {MAX_PARTS} parts")
        if isinstance(raw, Mapping):
            child = _Part(raw, part.file, part.folder, part.df, part.prefix + tuple(key.split(".")))
        elif isinstance(raw, str) and not read_files:
            if warnings is not None and Path(raw).name not in given_names:
                warnings.append(f"{part.where(key)}: {key} names the {target} file {raw!r}, which is not read here: "
                                "give its text as another part of the recipe")
            continue
        elif isinstance(raw, str):
            path = Path(raw).expanduser()
            if not path.is_absolute():
                path = (part.folder or Path.cwd()) / path
            if not path.exists():
                base = part.folder or Path.cwd()
                raise RecipeError(f"{part.where(key)}: {key}: the {target} file {raw!r} does not exist "
                                  f"(read relative to {base})")
            resolved = path.resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            child = _load_file(path, str(path) if Path(raw).is_absolute() else _shown(part, raw), part.where(key))
        else:
            raise RecipeError(f"{part.where(key)}: {key}: expected the path of a {target} file or its content, "
                              f"got {canon(raw)[:60]!r}")
        child.fmt = formats.get(target)
        out.append(child)
        if depth < 3:
            _references(child, formats, out, seen, depth + 1, read_files, warnings, given_names)


def _shown(part: _Part, raw: str) -> str:
    if part.file is None:
        return raw
    return str(Path(part.file).parent / raw)


# -- rules --------------------------------------------------------------------------------------

class _Found:
    __slots__ = ("value", "origin")

    def __init__(self, value, origin):
        self.value, self.origin = value, origin


def _apply(rule: Rule, part: _Part, version: tuple | None, warnings: list, name: str) -> _Found | None:
    if not rule.applies_to(version):
        return None
    if not rule.holds(part.data):
        return None
    fmt = part.fmt
    if rule.collect:
        return _collect(rule, part, version)
    if rule.key is None:
        value = rule.value
        if rule.default:
            return _Found(value, Origin("framework default", framework=fmt.framework,
                                        version=_version_text(fmt, version), source=rule.source,
                                        rule=rule.description))
        key = rule.when[0].key if rule.when else None
        return _Found(value, Origin("recipe", key=key, file=part.file, line=part.line(key) if key else None,
                                    source=rule.source, rule=rule.description))
    raw = lookup(part.data, rule.key)
    if raw is MISSING or raw is None or canon(raw) in rule.skip:
        return None
    value = raw
    if rule.match is not None:
        m = rule.match.search(canon(raw))
        if m is None:
            return None
        value = _scalar(m.group(1) if m.groups() else m.group(0))
    written = None
    if rule.mapping is not None:
        text = canon(value)
        if text in rule.mapping:
            value = rule.mapping[text]
            if canon(value) != text:  # the recipe's word is not vramwise's: the table says both
                written = text
        elif rule.strict_map:
            warnings.append(f"{part.where(rule.key)}: {rule.key} = {canon(raw)[:60]!r} is not a value vramwise "
                            f"knows for {name}: not used")
            return None
    if rule.divide_by or rule.multiply_by:
        value = _arithmetic(rule, part, raw, value)
        if value is None:
            return None
    if rule.default:
        return _Found(value, Origin("framework default", key=rule.key, framework=fmt.framework,
                                    version=_version_text(fmt, version), source=rule.source,
                                    rule=rule.description, written=written))
    return _Found(value, Origin("recipe", key=rule.key, file=part.file, line=part.line(rule.key), source=rule.source,
                                rule=rule.description, written=written))


def _collect(rule: Rule, part: _Part, version: tuple | None) -> _Found | None:
    """The names a collect rule builds from its keys (None when there are none)."""
    names: list = []
    first = None
    for key, items, if_true, absent in rule.collect:
        raw = lookup(part.data, key)
        present = raw is not MISSING and raw is not None
        if present and first is None:
            first = key
        if items is not None:
            if not present:
                continue
            entries = [t.strip() for t in raw.split(",")] if isinstance(raw, str) else raw
            if not isinstance(entries, (list, tuple)):
                raise RecipeError(f"{part.where(key)}: {key}: expected a list of module names, got {canon(raw)[:60]!r}")
            given = [canon(item) for item in entries]
            # in the order the format lists its items (the recipe's order does not matter), unknown ones after
            names.extend(n for item, adds in items.items() if item in given for n in adds)
            names.extend(item for item in given if item not in items)
        elif (raw if present else absent) not in (False, None, 0, "", "false", "False"):
            names.extend(if_true)
    names = list(dict.fromkeys(n for n in names if n))
    if not names:
        return None
    fmt = part.fmt
    if rule.default or first is None:  # every switch at its default: the framework's choice
        return _Found(tuple(names), Origin("framework default", framework=fmt.framework,
                                           version=_version_text(fmt, version), source=rule.source,
                                           rule=rule.description))
    return _Found(tuple(names), Origin("recipe", key=first, file=part.file, line=part.line(first), source=rule.source,
                                       rule=rule.description))


def _arithmetic(rule: Rule, part: _Part, raw: Any, value: Any) -> Any:
    """The value multiplied by the multiply_by keys and divided by the divide_by keys (None: one is absent)."""
    def whole(key: str, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise RecipeError(f"{part.where(key)}: {key}: a positive whole number is needed here "
                              f"(it scales {rule.key}), got {canon(v)[:40]!r}")
        return v

    value = whole(rule.key, value)
    for key in rule.multiply_by:
        by = lookup(part.data, key)
        if by is MISSING or by is None:
            return None
        value *= whole(key, by)
    for key in rule.divide_by:
        by = lookup(part.data, key)
        if by is MISSING or by is None:
            return None
        by = whole(key, by)
        if value % by and not rule.floor:
            raise RecipeError(f"{part.where(rule.key)}: {rule.key} ({canon(raw)}) is not a multiple of {key} ({by})")
        value //= by
    if value < 1:
        raise RecipeError(f"{part.where(rule.key)}: {rule.key} ({canon(raw)}) divided by "
                          f"{', '.join(rule.divide_by)} is below 1")
    return value


def _scalar(text: str) -> Any:
    """Text taken out of a value by a regex: a number or true/false when it reads as one, else the text."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, (bool, int, float)) else text


def _version_text(fmt: Format, version: tuple | None) -> str:
    """The release an origin names: the known release ``version`` is (as the file writes it)."""
    if version is None:
        return fmt.newest.version
    release = fmt.release(".".join(map(str, version)))
    return release.version if release is not None else ".".join(map(str, version))


def _resolve(rules_of, parts: list, versions: list, warnings: list, name: str) -> _Found | None:
    """The first value of ``name``: a winning rule of any part, the parts' keys (in part order), then their
    defaults."""
    for part, version in zip(parts, versions):
        for rule in rules_of(part.fmt):
            if rule.wins and not rule.default:
                found = _apply(rule, part, version, warnings, name)
                if found is not None:
                    return found
    for want_default in (False, True):
        for part, version in zip(parts, versions):
            for rule in rules_of(part.fmt):
                if rule.default != want_default:
                    continue
                found = _apply(rule, part, version, warnings, name)
                if found is not None:
                    return found
    return None


# -- warnings ----------------------------------------------------------------------------------

def _leaves(data: Any, prefix: str = "", depth: int = 0):
    """The dotted paths of a mapping's entries (a nested mapping gives its own entries; empty ones count)."""
    if not isinstance(data, Mapping) or depth > 8:
        return
    for k, v in data.items():
        path = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping) and v:
            yield from _leaves(v, path, depth + 1)
        else:
            yield path


def _covered(path: str, known: frozenset) -> bool:
    parts = path.split(".")
    return any(".".join(parts[:i]) in known for i in range(1, len(parts) + 1))


def _key_warnings(part: _Part, version: tuple | None, warnings: list) -> None:
    fmt = part.fmt
    for key, conds, why, since, until in fmt.unmodelled:
        if version is not None and not ((since is None or version >= since) and (until is None or version < until)):
            continue  # dated to releases other than the one read
        raw = lookup(part.data, key)
        if conds:
            if not all(c.holds(part.data) for c in conds):
                continue
        elif raw is MISSING or raw in (None, False, 0, "", [], {}):
            continue
        shown = "" if raw is MISSING else f" = {canon(raw)[:60]}"
        warnings.append(f"{part.where(key)}: {key}{shown} changes memory but is not modelled: {why}")
    if not fmt.warn_unknown:
        return
    known = fmt.known_keys()
    unknown = [p for p in _leaves(part.data) if not _covered(p, known)]
    for path in unknown[:MAX_WARNED_KEYS]:
        warnings.append(f"{part.where(path)}: unknown {fmt.name} key {path!r}: not used")
    if len(unknown) > MAX_WARNED_KEYS:
        warnings.append(f"{part.file or 'the recipe'}: {len(unknown) - MAX_WARNED_KEYS} more unknown keys: not used")


# -- overrides ----------------------------------------------------------------------------------

def _override_value(name: str, value: Any) -> Any:
    """A --set value given as text becomes the type its setting reads (numbers, true/false, lists)."""
    setting = _BY_NAME.get(name)
    if not isinstance(value, str) or setting is None or setting.cli_type == "str":
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return parsed if isinstance(parsed, (bool, int, float)) else value


def _overrides(overrides: Any, extras: set) -> dict:
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise SettingsError(f"overrides must be a mapping of setting names to values, got {type(overrides).__name__}")
    allowed = set(_BY_NAME) | set(_OVERRIDE_EXTRA) | extras
    unknown = sorted(str(k) for k in overrides if k not in allowed)
    if unknown:
        raise SettingsError(f"unknown override(s) {', '.join(unknown)} (settings: {', '.join(_BY_NAME)}; "
                            f"also: {', '.join(sorted(set(_OVERRIDE_EXTRA) | extras))})")
    return {k: _override_value(k, v) for k, v in overrides.items()}


# -- the reader ---------------------------------------------------------------------------------

def _profile_for_strategy(profile: str, settings: dict, origins: dict, warnings: list, registry) -> str:
    """A strategy the profile does not model: the profile that models it, said in a warning."""
    strategy = settings.get("strategy", "none")
    if strategy in (None, "none") or settings.get("method") == "inference":
        return profile
    try:
        served = registry.strategy_info(strategy)["profiles"]
    except VramwiseError:
        return profile  # estimate names the unknown strategy
    if profile in served or origins.get("profile", Origin("vramwise default")).kind == "override":
        return profile
    warnings.append(f"the {profile} profile does not model strategy {strategy} ({origins['strategy'].describe()}): "
                    f"estimated with the {served[0]} profile")
    return served[0]


def read_recipe(source: Any, *, framework: str | None = None, overrides: Mapping[str, Any] | None = None,
                formats: Formats | None = None, registry=None, read_files: bool = True, launch=None) -> Recipe:
    """Read a training recipe: a path, a mapping, or a list of them (the main recipe first, then the
    parts that complete it: a DeepSpeed or accelerate config, a PEFT adapter config...).

    ``framework`` names the main part's format (``"axolotl"``; ``"litgpt@0.5.9"`` also names the release whose
    defaults are read, one its format file lists) instead of detecting it; without a version every part is
    read under the newest release its format knows. ``overrides`` (setting names, ``model``, ``profile`` or
    an extra such as ``gradient_accumulation_steps``) win over everything the recipe says.
    A part may also be a :class:`RecipeText` (an upload). With ``read_files`` false no file is read:
    parts are mappings or texts, and a file a recipe names is reported in a warning instead (the server
    reads no file named by a request).
    ``launch`` (a :class:`~vramwise.recipes.launch.LaunchLine`) gives the settings its line states (strategy,
    world_size, gpus_per_node), under the overrides and over the recipe's keys, except a strategy the launcher
    only implies (torchrun on several processes: ddp), which gives way to a recipe's own key.
    Raises :class:`RecipeError` naming file, line and key for a recipe that cannot be read.
    """
    formats = formats or bundled_formats()
    forced, forced_version, version_text = _split_framework(framework, formats)
    sources = list(source) if isinstance(source, (list, tuple)) else [source]
    if not sources:
        raise RecipeError("no recipe given")
    if len(sources) > MAX_PARTS:
        raise RecipeError(f"a recipe has at most {MAX_PARTS} parts, got {len(sources)}")
    given = [_load(s, i, read_files) for i, s in enumerate(sources)]
    parts: list = []
    seen: set = set()
    warnings: list = []
    for i, part in enumerate(given):
        part.fmt = forced if (i == 0 and forced is not None) else _detect(part, formats)
        if part.folder is not None:
            seen.add(Path(part.file).resolve())
        parts.append(part)
        _references(part, formats, parts, seen, 1, read_files, warnings,
                    frozenset(Path(p.file).name for p in given if p.file))
    main = given[0]
    if launch is None:  # the launch line the recipe's own header comment gives (torchtune's configs)
        from vramwise.recipes.launch import header_launch

        launch = header_launch(main.df.text if main.df is not None else None, main.fmt, main.file)
    read_under = [_read_under(p, forced_version if p is main else None, warnings) for p in parts]
    versions = [v for v, _ in read_under]
    if version_text is None and read_under[0][1]:
        version_text = main.fmt.release(".".join(map(str, versions[0]))).version
    extras_names = {n for p in parts for n in p.fmt.extras}
    over = _overrides(overrides, extras_names)
    if "method" in over and "load_in_4bit" not in over:  # a method given over the recipe brings its own base
        over["load_in_4bit"] = None
    settings: dict = {}
    origins: dict = {}
    stated = launch.settings() if launch is not None else {}
    for s in SETTINGS:
        if s.applies_to == ("inference",) and s.name not in over:  # serving settings: no training recipe sets them
            continue
        if s.name in over:
            value, origin = over[s.name], Origin("override", key=s.name)
        else:
            found = _resolve(lambda f, n=s.name: f.settings.get(n, ()), parts, versions, warnings, s.name)
            if s.name in stated:
                value, origin, implied = stated[s.name]
                if not (implied and found is not None and found.origin.kind == "recipe"):
                    found = _Found(value, origin)
            value, origin = (s.default, Origin("vramwise default")) if found is None else (found.value, found.origin)
        if origin.kind == "vramwise default":  # vramwise's own default, kept as the table has it (None: resolved later)
            settings[s.name] = s.default
            origins[s.name] = origin
            continue
        try:
            settings[s.name] = s.parse(s.name, value)
        except SettingsError as e:
            raise RecipeError(_value_problem(origin, s.name, e)) from None
        origins[s.name] = origin
    if launch is not None and settings["strategy"] in (None, "none") and settings["world_size"] != 1 \
            and origins["world_size"].kind == "launch line":  # a world size is the ranks of a strategy
        warnings.append(f"world size {settings['world_size']} ({origins['world_size'].describe()}) is not used: "
                        "neither the launch line nor the recipe states a multi-GPU strategy; set strategy "
                        "(--set strategy=NAME)")
        settings["world_size"], origins["world_size"] = _BY_NAME["world_size"].default, Origin("vramwise default")
    _joint_rules(settings, origins, warnings, parts)
    extras: dict = {}
    for name in sorted(extras_names):
        if name in over:
            extras[name], origins[name] = over[name], Origin("override", key=name)
            continue
        found = _resolve(lambda f, n=name: f.extras.get(n, ()), parts, versions, warnings, name)
        if found is not None:
            extras[name], origins[name] = found.value, found.origin
    model = _model(over, parts, versions, warnings, origins)
    profile = _profile(over, parts, versions, warnings, origins)
    for part, version in zip(parts, versions):
        _key_warnings(part, version, warnings)
    if settings["strategy"] not in (None, "none") and origins["world_size"].kind == "vramwise default":
        warnings.append(f"strategy {settings['strategy']} ({origins['strategy'].describe()}) on 1 GPU: the recipe "
                        "does not say how many; set world_size (--set world_size=N)")
    if registry is None:
        from vramwise.estimation.registry import Registry

        registry = Registry.default()
    profile = _profile_for_strategy(profile, settings, origins, warnings, registry)
    from vramwise.recipes.writer import writer

    return Recipe(
        model=model, settings=settings, profile=profile, origins=origins, extras=extras,
        warnings=tuple(dict.fromkeys(warnings)), format=main.fmt.name, framework=main.fmt.framework,
        framework_version=version_text or main.fmt.newest.version, path=main.file,
        release_basis=tuple(sig.says() for sig in read_under[0][1]),
        parts=tuple((p.fmt.name, p.file) for p in parts if p.prefix == ()),
        writer=writer(tuple(p.fmt for p in parts)),
    )


def _joint_rules(settings: dict, origins: dict, warnings: list, parts: list) -> None:
    """What one setting implies for another across parts: LoRA on a 4-bit base (an adapter config beside a
    4-bit quantization config) is QLoRA; a sequence length that the recipe's formats could give but that
    it does not is said."""
    if settings["method"] == "lora" and settings["load_in_4bit"] is True and origins["method"].kind != "override":
        settings["method"] = "qlora"
        origins["method"] = origins["load_in_4bit"]
    if origins["seq_len"].kind == "vramwise default" and any(p.fmt.settings.get("seq_len") for p in parts):
        warnings.append(f"the recipe gives no sequence length: vramwise's default {settings['seq_len']} is used "
                        "(set seq_len, --set seq_len=N)")


def _value_problem(origin: Origin, name: str, error: Exception) -> str:
    if origin.kind == "recipe":
        where = origin.location or "the recipe"
        return f"{where}: {origin.key}: {error} (setting {name})"
    if origin.kind == "override":
        return f"override {name}: {error}"
    return f"{origin.describe()} for {name}: {error}"


def _model(over: dict, parts: list, versions: list, warnings: list, origins: dict) -> Any:
    if "model" in over:
        origins["model"] = Origin("override", key="model")
        return over["model"]
    found = _resolve(lambda f: f.model, parts, versions, warnings, "model")
    if found is None:
        return None
    origins["model"] = found.origin
    value = found.value
    if not isinstance(value, str) or not value.strip():
        raise RecipeError(f"{found.origin.location or 'the recipe'}: {found.origin.key}: the model must be a name "
                          f"or a path, got {canon(value)[:60]!r}")
    value = value.strip()
    part = next((p for p in parts if p.file == found.origin.file), None)
    folder = part.folder if part is not None else None
    if folder is not None and found.origin.key is not None:  # the key's own text, before any rule changed it
        raw = lookup(part.data, found.origin.key)
        candidates = [raw.strip(), value] if isinstance(raw, str) and raw.strip() != value else [value]
    else:
        candidates = [value]
    for text in candidates:
        candidate = Path(text).expanduser()
        if candidate.is_absolute():
            continue
        if folder is not None and (folder / candidate).exists():
            return str(folder / candidate)
    return value


def _profile(over: dict, parts: list, versions: list, warnings: list, origins: dict) -> str:
    if "profile" in over:
        origins["profile"] = Origin("override", key="profile")
        value = over["profile"]
    else:
        found = _resolve(lambda f: f.profile, parts, versions, warnings, "profile")
        if found is None:
            origins["profile"] = Origin("vramwise default")
            return DEFAULT_PROFILE
        origins["profile"], value = found.origin, found.value
    if not isinstance(value, str) or not value:
        raise SettingsError(f"profile must be a name, got {value!r}")
    return value
