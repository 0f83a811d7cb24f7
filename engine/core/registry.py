"""The registry: families and profiles, each validated and compiled when first used.

Creating a registry reads every family file once to learn the model types it serves;
a family is validated against its schema and compiled (with its parents) the first
time an estimate needs it, and a profile the first time it is named. ``check_all``
loads everything, as the test suite does.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Iterator

import yaml

from vramwise.core.errors import ConfigError, FileFormatError, SettingsError, VramwiseError
from vramwise.core.family import Family, compile_family
from vramwise.core.profile import Overlay, Profile, build_profile, check_inputs
from vramwise.core.datafiles import MAX_FILE_BYTES, DataFile, load_data_file

__all__ = ["Registry"]

try:
    _FastLoader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _FastLoader = yaml.SafeLoader


def _entries(location, display: str | None) -> list[tuple[str, str]]:
    """(display path, text) of each *.yaml in a folder or package resource folder.

    Data files are untrusted: a file over MAX_FILE_BYTES, not UTF-8 or unreadable is rejected
    with its path before anything parses it.
    """
    out = []
    try:
        items = sorted(location.iterdir(), key=lambda p: p.name)
    except OSError as e:
        raise FileFormatError(f"{display or location}: cannot list the folder ({e.strerror or e})") from None
    for item in items:
        if not (item.name.endswith(".yaml") and item.is_file()):
            continue
        shown = f"{display}/{item.name}" if display else str(item)
        try:
            size = item.stat().st_size if hasattr(item, "stat") else 0
            if size > MAX_FILE_BYTES:
                raise FileFormatError(f"{shown}:1:1: $: the file has {size:,} bytes; data files hold at most {MAX_FILE_BYTES:,}")
            raw = item.read_bytes()
        except OSError as e:
            raise FileFormatError(f"{shown}:1:1: $: cannot be read ({e.strerror or e})") from None
        if len(raw) > MAX_FILE_BYTES:
            raise FileFormatError(f"{shown}:1:1: $: the file has {len(raw):,} bytes; data files hold at most {MAX_FILE_BYTES:,}")
        try:
            out.append((shown, raw.decode("utf-8")))
        except UnicodeDecodeError as e:
            raise FileFormatError(f"{shown}:1:1: $: not UTF-8 text (byte {e.start})") from None
    return out


class _Cache:
    """A bounded mapping: the oldest entry goes when it is full (resettable with ``clear``)."""

    __slots__ = ("_data", "_size")

    def __init__(self, size: int):
        self._data: dict = {}
        self._size = size

    def get(self, key):
        return self._data.get(key)

    def put(self, key, value) -> None:
        if len(self._data) >= self._size:
            del self._data[next(iter(self._data))]
        self._data[key] = value

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


_MODEL_TYPES_LINE = re.compile(r"^model_types:[ \t]*(\[[^\n]*\])[ \t]*(#[^\n]*)?$", re.M)
_FALLBACK_LINE = re.compile(r"^fallback:[ \t]*true[ \t]*(#[^\n]*)?$", re.M)


def _head(text: str, fast: bool) -> dict | None:
    """``model_types`` and ``fallback`` of a family file. ``fast``: read from their top-level lines
    when each is written on one line (checked again when the family is compiled); else, and
    when the lines are not found that way, the whole file is parsed."""
    if fast:
        lines = list(_MODEL_TYPES_LINE.finditer(text))
        if len(lines) == 1 or (not lines and re.search(r"^model_types:", text, re.M) is None):
            types = yaml.load(lines[0].group(1), Loader=_FastLoader) if lines else []
            if isinstance(types, list):
                return {"model_types": types, "fallback": _FALLBACK_LINE.search(text) is not None}
    try:
        head = load_data_file(text, "<index>", "family-1.schema.json", validate=False).data
    except FileFormatError:
        return None  # reported with its position when the file is loaded
    return head if isinstance(head, dict) else None


class _FamilyFiles(Mapping):
    """Family name -> DataFile, loading (and validating, if asked) each file on first access."""

    def __init__(self, texts: dict[str, tuple[str, str]], validate: bool):
        self._texts = texts
        self._validate = validate
        self._loaded: dict[str, DataFile] = {}

    def __getitem__(self, name: str) -> DataFile:
        if name not in self._loaded:
            shown, text = self._texts[name]
            df = load_data_file(text, shown, "family-1.schema.json", validate=self._validate)
            if df.data["family"] != name:
                raise FileFormatError(df.problem(("family",), f"family name {df.data['family']!r} differs from the file name {name!r}"))
            self._loaded[name] = df
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)

    def __contains__(self, name: object) -> bool:
        return name in self._texts


class Registry:
    """Families and profiles from the bundled data (default) or from folders given explicitly.

    ``families_dir`` holds ``<family>.yaml`` files; ``formulas_dir`` holds one folder per
    profile with its ``profile.yaml``, and folders of formula files several profiles list
    (``shared/``). Everything loaded is kept on this object.
    """

    _default: "Registry | None" = None

    def __init__(self, families_dir: str | Path | None = None, formulas_dir: str | Path | None = None,
                 *, validate: bool | None = None):
        if families_dir is None:
            fam_loc, fam_disp = resources.files("vramwise.families"), "families"
        else:
            fam_loc, fam_disp = Path(families_dir), None
        if formulas_dir is None:
            self._formulas, self._formulas_display = resources.files("vramwise.formulas"), "formulas"
        else:
            self._formulas, self._formulas_display = Path(formulas_dir), None
        # the bundled files are validated by the test suite; files from elsewhere on every load
        self.validate = validate if validate is not None else not (families_dir is None and formulas_dir is None)
        texts = {shown.rsplit("/", 1)[-1].removesuffix(".yaml"): (shown, text) for shown, text in _entries(fam_loc, fam_disp)}
        if not texts:
            raise FileFormatError(f"{fam_disp or families_dir}: no family files found")
        self._files = _FamilyFiles(texts, self.validate)
        self._compiled: dict[str, Family] = {}
        self._profiles: dict[str, Profile] = {}
        self._profile_parts: dict[str, tuple] = {}  # profile -> (manifest, formula files), to add a strategy's
        self._strategies: DataFile | None = None  # formulas/strategies/strategies.yaml, once read
        self._strategy_texts: dict[str, str] = {}  # display path -> text of each file of formulas/strategies
        self._strategy_files: dict[str, DataFile] = {}
        self._strategy_infos: dict[str, Mapping] = {}
        self._with_strategy: dict[tuple, Profile] = {}  # (profile, strategy) -> compiled
        self._by_type: dict[str, str] = {}
        self._fallback: str | None = None
        #: resolved models by config content or file identity, static estimate stages, normalised settings
        self.models = _Cache(256)
        self.stages = _Cache(1024)
        self.settings = _Cache(1024)
        problems: list[str] = []
        owners: dict[str, str] = {}
        fallbacks = []
        for name, (shown, text) in texts.items():
            head = _head(text, fast=not self.validate)
            if head is None:  # report it properly, with its position
                self._files[name]
                continue
            types = head.get("model_types") or []
            if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
                self._files[name]  # the schema names the problem with its position
                raise FileFormatError(f"{self._files._texts[name][0]}:1:1: $.model_types: a list of model type names")
            for mt in types:
                if mt in owners:
                    problems.append(
                        self._files[name].problem(("model_types",), f"model type {mt!r} is already served by family {owners[mt]!r}")
                    )
                owners[mt] = name
            if head.get("fallback") is True:
                fallbacks.append(name)
        if len(fallbacks) > 1:
            problems.append(f"families {', '.join(fallbacks)} are all marked fallback: only one may be")
        if problems:
            raise FileFormatError(problems)
        self._by_type = owners
        self._fallback = fallbacks[0] if fallbacks else None

    def clear_caches(self) -> None:
        """Forget resolved models, estimate stages and normalised settings (compiled files stay)."""
        self.models.clear()
        self.stages.clear()
        self.settings.clear()

    @classmethod
    def default(cls) -> "Registry":
        """The registry of the bundled files, built on first use."""
        if cls._default is None:
            cls._default = cls()
        return cls._default

    @classmethod
    def reset_default(cls) -> None:
        """Forget the bundled registry (it is rebuilt on next use)."""
        cls._default = None

    # -- families -------------------------------------------------------------------------
    def family(self, name: str) -> Family:
        """The compiled family ``name`` (validated with its parents on first use)."""
        if name not in self._compiled:
            if name not in self._files:
                raise VramwiseError(f"unknown family {name!r} (known: {', '.join(sorted(self._files))})")
            fam = compile_family(name, self._files)
            indexed = sorted(t for t, owner in self._by_type.items() if owner == name)
            if sorted(set(fam.model_types)) != indexed or fam.fallback != (self._fallback == name):
                raise FileFormatError(self._files[name].problem(
                    ("model_types",), "write model_types as a one-line list, and fallback on one line"))
            self._compiled[name] = fam
        return self._compiled[name]

    @property
    def families(self) -> dict[str, Family]:
        """Every family, compiled (problems in any file are raised together)."""
        errors: list[FileFormatError] = []
        for name in self._files:
            try:
                self.family(name)
            except FileFormatError as e:
                if all(e.problems != seen.problems for seen in errors):
                    errors.append(e)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise FileFormatError([p for e in errors for p in e.problems])
        return {name: self._compiled[name] for name in sorted(self._files)}

    def family_for(self, model_types: Iterable[str | None]) -> tuple[Family, str | None]:
        """The family serving the first known model type, else the fallback family and a warning."""
        types = [t for t in model_types if t]
        for t in types:
            if t in self._by_type:
                return self.family(self._by_type[t]), None
        if self._fallback is None:
            raise VramwiseError(f"no family serves model type {types[0] if types else None!r} and none is marked fallback")
        if types:
            note = f"model type {types[0]!r} has no family; using the generic family {self._fallback!r}"
        else:
            note = f"config has no model_type; using the generic family {self._fallback!r}"
        return self.family(self._fallback), note

    # -- models -------------------------------------------------------------------------
    def model(self, source: Any, *, trust_remote_code: bool = False):
        """The resolved model of a config source (path, folder, mapping, PretrainedConfig, hub id).

        A mapping is resolved once per content, a local file once per version (its size and
        modification time, and those of the weights' index and folder); hub ids are read each time.
        """
        from vramwise.inputs.config import read_config

        key = _source_key(source)
        if key is not None:
            hit = self.models.get(key)
            if hit is not None and (hit[1] is None or _same(hit[1], source)):
                return hit[0]
        root, origin = read_config(source, trust_remote_code=trust_remote_code)
        spec = self.resolve(root, origin=origin, source=source)
        if key is not None:
            snapshot = None
            if key[0] == "mapping" and not _json_like(source):
                # repr identifies JSON data exactly; other objects are compared with a copy on each hit
                try:
                    snapshot = copy.deepcopy(source)
                except Exception:  # noqa: BLE001 - an uncopyable mapping is simply not kept
                    return spec
            self.models.put(key, (spec, snapshot))
        return spec

    def resolve(self, root: Mapping, *, family: str | None = None, origin: str = "mapping", source: Any = None,
                warnings: Iterable[str] = (), checkpoint_bytes: int | None = None):
        """Resolve a config mapping against its family (chosen by model type unless ``family`` names one)."""
        from vramwise.core.resolve import resolve_model
        from vramwise.inputs.config import checkpoint_size, text_view

        text = text_view(root)
        types = [text.get("model_type"), root.get("model_type")]
        for t, where in zip(types, ("text_config.model_type" if text is not root else "model_type", "model_type")):
            if t is not None and not isinstance(t, str):
                raise ConfigError(f"config field {where} should be a string, got {type(t).__name__} {str(t)[:60]}")
        notes = list(warnings)
        if family is not None:
            fam = self.family(family)
        else:
            # a family that names the root model type itself models the whole config (a drafter or
            # head around a text tower of another family's type), so it wins over the text tower's type
            served_root = types[1] if types[1] in self._by_type else None
            fam, note = self.family_for([served_root] if served_root else types)
            if note:
                notes.append(note)
        model_type = next((t for t in types if t), None)
        size_origin = None
        if source is not None and checkpoint_bytes is None:
            checkpoint_bytes, size_origin = checkpoint_size(source)
        return resolve_model(
            fam, root, text, model_type=model_type, warnings=notes, source=origin,
            checkpoint_bytes=checkpoint_bytes, checkpoint_origin=size_origin,
        )

    # -- profiles -------------------------------------------------------------------------
    def profile_names(self) -> list[str]:
        return sorted(
            p.name for p in self._formulas.iterdir() if p.is_dir() and p.joinpath("profile.yaml").is_file()
        )

    def profile(self, name: str, strategy: str | None = None) -> Profile:
        """The compiled profile ``name``; with ``strategy`` (a name of :meth:`strategy_names` other than
        none), the profile with that multi-GPU strategy's formulas added (compiled once, kept)."""
        if strategy is not None and strategy != "none":
            return self._strategy_profile(name, strategy)
        if name in self._profiles:
            return self._profiles[name]
        names = self.profile_names()
        if name not in names:
            raise SettingsError(f"unknown profile {name!r} (available: {', '.join(names)})")
        folder = self._formulas.joinpath(name)
        disp = f"{self._formulas_display}/{name}" if self._formulas_display else None
        texts = dict(_entries(folder, disp))
        manifest_path = f"{disp}/profile.yaml" if disp else str(folder.joinpath("profile.yaml"))
        manifest = load_data_file(texts.pop(manifest_path), manifest_path, "profile-1.schema.json", validate=self.validate)
        files = []
        problems = []
        listed = manifest.data["files"]
        shared: dict[str, dict] = {}  # other folder -> {file name: (shown path, text)}
        for k, fname in enumerate(listed):
            if "/" in fname:  # a file of another folder of the formulas root (formulas/shared, or a profile's)
                other, leaf = fname.split("/", 1)
                if other == name or not self._formulas.joinpath(other).is_dir():
                    problems.append(manifest.problem(("files", k), f"listed file {fname!r}: {other!r} is not another "
                                                                   "profile nor a folder of shared formula files"))
                    continue
                if other not in shared:
                    sdisp = f"{self._formulas_display}/{other}" if self._formulas_display else None
                    shared[other] = {p.rsplit("/", 1)[-1]: (p, t) for p, t in _entries(self._formulas.joinpath(other), sdisp)}
                if leaf not in shared[other] or leaf in ("profile.yaml", "strategies.yaml"):
                    problems.append(manifest.problem(("files", k), f"listed file {fname!r} does not exist"))
                    continue
                shown, text = shared[other][leaf]
                try:
                    files.append(load_data_file(text, shown, "formulas-1.schema.json", validate=self.validate))
                except FileFormatError as e:
                    problems.extend(e.problems)
                continue
            shown = f"{disp}/{fname}" if disp else str(folder.joinpath(fname))
            if shown not in texts:
                problems.append(manifest.problem(("files", k), f"listed file {fname!r} does not exist"))
                continue
            try:
                files.append(load_data_file(texts[shown], shown, "formulas-1.schema.json", validate=self.validate))
            except FileFormatError as e:
                problems.extend(e.problems)
        unlisted = [p for p in texts if p.rsplit("/", 1)[-1] not in listed]  # (own files only)
        if unlisted:
            problems.append(manifest.problem(("files",), f"files not listed: {', '.join(unlisted)}"))
        if manifest.data["profile"] != name:
            problems.append(manifest.problem(("profile",), f"profile name {manifest.data['profile']!r} differs from its folder {name!r}"))
        if problems:
            raise FileFormatError(problems)
        prof = build_profile(manifest, files)
        self._profiles[name] = prof
        self._profile_parts[name] = (manifest, files)
        return prof

    # -- strategies -------------------------------------------------------------------------
    def _strategy_folder(self) -> tuple[Any, str | None]:
        """(the strategies folder, its display path or None)."""
        disp = f"{self._formulas_display}/strategies" if self._formulas_display else None
        return self._formulas.joinpath("strategies"), disp

    def _strategy_manifest(self) -> DataFile:
        """formulas/strategies/strategies.yaml, and the texts of its folder, read once (with the limits
        every data file is read under)."""
        if self._strategies is None:
            folder, disp = self._strategy_folder()
            if not folder.joinpath("strategies.yaml").is_file():
                shown = f"{disp}/strategies.yaml" if disp else str(folder.joinpath("strategies.yaml"))
                raise SettingsError(f"{shown}: no multi-GPU strategies in this formulas folder")
            self._strategy_texts = dict(_entries(folder, disp))
            path = f"{disp}/strategies.yaml" if disp else str(folder.joinpath("strategies.yaml"))
            self._strategies = load_data_file(self._strategy_texts[path], path, "strategies-1.schema.json",
                                              validate=self.validate)
        return self._strategies

    def strategy_names(self) -> list[str]:
        """The multi-GPU strategies of the formulas folder (none when it has no strategies manifest)."""
        if not self._strategy_folder()[0].joinpath("strategies.yaml").is_file():
            return []
        return list(self._strategy_manifest().data["strategies"])

    def strategy_info(self, strategy: str) -> Mapping[str, Any]:
        """The manifest entry of ``strategy`` (summary, source, files, offload settings) and the profiles it
        serves (read-only, built once)."""
        got = self._strategy_infos.get(strategy)
        if got is None:
            man = self._strategy_manifest().data
            if strategy not in man["strategies"]:
                raise SettingsError(f"unknown strategy {strategy!r} (available: none, {', '.join(man['strategies'])})")
            got = self._strategy_infos[strategy] = MappingProxyType(
                dict(man["strategies"][strategy], profiles=tuple(man["profiles"])))
        return got

    def _strategy_profile(self, name: str, strategy: str) -> Profile:
        key = (name, strategy)
        got = self._with_strategy.get(key)
        if got is not None:
            return got
        info = self.strategy_info(strategy)
        if name not in info["profiles"]:
            raise SettingsError(f"strategy {strategy} is modelled on the {', '.join(info['profiles'])} profile "
                                f"(the one `vramwise measure --strategy` checks), not on {name}: use --profile "
                                f"{info['profiles'][0]}")
        self.profile(name)
        manifest, files = self._profile_parts[name]
        man = self._strategy_manifest()
        folder, disp = self._strategy_folder()
        problems, extra = [], []
        for fname in info["files"]:
            shown = f"{disp}/{fname}" if disp else str(folder.joinpath(fname))
            if shown not in self._strategy_texts:
                problems.append(man.problem(("strategies", strategy, "files"), f"listed file {fname!r} does not exist"))
                continue
            if shown not in self._strategy_files:
                try:
                    self._strategy_files[shown] = load_data_file(self._strategy_texts[shown], shown,
                                                                 "formulas-1.schema.json", validate=self.validate)
                except FileFormatError as e:
                    problems.extend(e.problems)
                    continue
            extra.append(self._strategy_files[shown])
        if problems:
            raise FileFormatError(problems)
        entry = man.data["strategies"][strategy]
        outputs, parts = (entry["outputs"], ("strategies", strategy, "outputs")) if "outputs" in entry else (
            man.data["outputs"], ("outputs",))
        overlay = Overlay(strategy, tuple(extra), man, parts, outputs, tuple(entry.get("ranks", ())))
        prof = build_profile(manifest, files, overlay)
        self._with_strategy[key] = prof
        return prof

    def check_all(self) -> None:
        """Load and cross-check every family, every profile and every strategy with its profiles."""
        families = self.families
        problems: list[str] = []
        for pname in self.profile_names():
            prof = self.profile(pname)
            for fam in families.values():
                if prof.serves(fam):
                    problem = check_inputs(prof, fam)
                    if problem:
                        problems.append(problem)
        for sname in self.strategy_names():
            for pname in self.strategy_info(sname)["profiles"]:
                self.profile(pname, sname)
        if problems:
            raise FileFormatError(problems)


def _stat(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)


def _source_key(source: Any) -> tuple | None:
    """A cheap identity of a config source for the model cache (None: do not cache)."""
    if isinstance(source, Mapping):
        if any(isinstance(v, (list, tuple, dict)) and len(v) > _LARGE for v in source.values()):
            return None  # a long field: resolved each time rather than printed whole as a key
        try:
            return ("mapping", repr(source))
        except Exception:  # noqa: BLE001 - an unprintable mapping is simply not cached
            return None
    if isinstance(source, (str, os.PathLike)):
        text = os.path.expanduser(os.fspath(source))
        here = _stat(text)
        if here is None:  # a catalog name is resolved once; a hub id or a missing file each time
            from vramwise.inputs.catalog import CATALOG_PREFIX, HUB_PREFIX, find_model

            if not isinstance(source, str) or source.startswith(HUB_PREFIX):
                return None
            entry = find_model(source[len(CATALOG_PREFIX):] if source.startswith(CATALOG_PREFIX) else source)
            return ("catalog", entry.id) if entry is not None else None
        folder = text if os.path.isdir(text) else os.path.dirname(text) or "."
        config = os.path.join(text, "config.json") if folder == text else text
        index = os.path.join(folder, "model.safetensors.index.json")
        return ("path", text, _stat(config), _stat(folder), _stat(index))
    return None


def _same(snapshot: Any, source: Any) -> bool:
    try:
        return bool(snapshot == source)
    except Exception:  # noqa: BLE001
        return False


_JSON_TYPES = (str, int, float, bool, type(None))
#: Mappings with a top-level field longer than this are not cached (their key would be the whole config).
_LARGE = 10_000


def _json_like(value: Any) -> bool:
    """Whether ``value`` holds only dicts with string keys, lists and JSON scalars (walked iteratively)."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict:
            if not all(type(k) is str for k in v):
                return False
            stack.extend(v.values())
        elif t is list:
            stack.extend(x for x in v if type(x) not in _JSON_TYPES)
        elif t not in _JSON_TYPES:
            return False
    return True
