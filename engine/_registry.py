"""The registry: families and profiles, each validated and compiled when first used.

Creating a registry reads every family file once to learn the model types it serves;
a family is validated against its schema and compiled (with its parents) the first
time an estimate needs it, and a profile the first time it is named. ``check_all``
loads everything, as the test suite does.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Iterable, Iterator

import yaml

from ._errors import FileFormatError, SettingsError, VramwiseError
from ._family import Family, compile_family
from ._profile import Profile, build_profile, check_inputs
from ._yamlio import DataFile, load_data_file

__all__ = ["Registry"]

try:
    _FastLoader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _FastLoader = yaml.SafeLoader


def _entries(location, display: str | None) -> list[tuple[str, str]]:
    """(display path, text) of each *.yaml in a folder or package resource folder."""
    out = []
    for item in sorted(location.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".yaml") and item.is_file():
            shown = f"{display}/{item.name}" if display else str(item)
            out.append((shown, item.read_text(encoding="utf-8")))
    return out


class _FamilyFiles(Mapping):
    """Family name -> validated DataFile, loading (and validating) each file on first access."""

    def __init__(self, texts: dict[str, tuple[str, str]]):
        self._texts = texts
        self._loaded: dict[str, DataFile] = {}

    def __getitem__(self, name: str) -> DataFile:
        if name not in self._loaded:
            shown, text = self._texts[name]
            df = load_data_file(text, shown, "family-1.schema.json")
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
    profile with its ``profile.yaml``. Everything loaded is kept on this object.
    """

    _default: "Registry | None" = None

    def __init__(self, families_dir: str | Path | None = None, formulas_dir: str | Path | None = None):
        if families_dir is None:
            fam_loc, fam_disp = resources.files("vramwise.families"), "families"
        else:
            fam_loc, fam_disp = Path(families_dir), None
        if formulas_dir is None:
            self._formulas, self._formulas_display = resources.files("vramwise.formulas"), "formulas"
        else:
            self._formulas, self._formulas_display = Path(formulas_dir), None
        texts = {shown.rsplit("/", 1)[-1].removesuffix(".yaml"): (shown, text) for shown, text in _entries(fam_loc, fam_disp)}
        if not texts:
            raise FileFormatError(f"{fam_disp or families_dir}: no family files found")
        self._files = _FamilyFiles(texts)
        self._compiled: dict[str, Family] = {}
        self._profiles: dict[str, Profile] = {}
        self._checked: set[tuple[str, str]] = set()
        self._by_type: dict[str, str] = {}
        self._fallback: str | None = None
        problems: list[str] = []
        owners: dict[str, str] = {}
        fallbacks = []
        for name, (shown, text) in texts.items():
            try:
                head = yaml.load(text, Loader=_FastLoader)
            except yaml.YAMLError:
                head = None
            if not isinstance(head, dict):  # report it properly, with its position
                self._files[name]
                continue
            types = head.get("model_types") or []
            if not isinstance(types, list):
                self._files[name]
                continue
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
            self._compiled[name] = compile_family(name, self._files)
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

    # -- profiles -------------------------------------------------------------------------
    def profile_names(self) -> list[str]:
        return sorted(
            p.name for p in self._formulas.iterdir() if p.is_dir() and p.joinpath("profile.yaml").is_file()
        )

    def profile(self, name: str) -> Profile:
        if name in self._profiles:
            return self._profiles[name]
        names = self.profile_names()
        if name not in names:
            raise SettingsError(f"unknown profile {name!r} (available: {', '.join(names)})")
        folder = self._formulas.joinpath(name)
        disp = f"{self._formulas_display}/{name}" if self._formulas_display else None
        texts = dict(_entries(folder, disp))
        manifest_path = f"{disp}/profile.yaml" if disp else str(folder.joinpath("profile.yaml"))
        manifest = load_data_file(texts.pop(manifest_path), manifest_path, "profile-1.schema.json")
        files = []
        problems = []
        listed = manifest.data["files"]
        for fname in listed:
            shown = f"{disp}/{fname}" if disp else str(folder.joinpath(fname))
            if shown not in texts:
                problems.append(manifest.problem(("files",), f"listed file {fname!r} does not exist"))
                continue
            try:
                files.append(load_data_file(texts[shown], shown, "formulas-1.schema.json"))
            except FileFormatError as e:
                problems.extend(e.problems)
        unlisted = [p for p in texts if p.rsplit("/", 1)[-1] not in listed]
        if unlisted:
            problems.append(manifest.problem(("files",), f"files not listed: {', '.join(unlisted)}"))
        if manifest.data["profile"] != name:
            problems.append(manifest.problem(("profile",), f"profile name {manifest.data['profile']!r} differs from its folder {name!r}"))
        if problems:
            raise FileFormatError(problems)
        prof = build_profile(manifest, files)
        self._profiles[name] = prof
        return prof

    def check_pair(self, family: Family, profile: Profile) -> None:
        """Raise when ``family`` lacks a fact or layer attribute that ``profile`` needs."""
        key = (family.name, profile.name)
        if key in self._checked:
            return
        problem = check_inputs(profile, family)
        if problem:
            raise FileFormatError(problem)
        self._checked.add(key)

    def check_all(self) -> None:
        """Load and cross-check every family and every profile."""
        families = self.families
        problems: list[str] = []
        for pname in self.profile_names():
            prof = self.profile(pname)
            for fam in families.values():
                if not fam.abstract:
                    problem = check_inputs(prof, fam)
                    if problem:
                        problems.append(problem)
        if problems:
            raise FileFormatError(problems)
