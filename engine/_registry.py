"""The registry: every family and profile, loaded and validated once per Registry object."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Iterable

from ._errors import FileFormatError, VramwiseError
from ._family import Family, build_families
from ._profile import Profile, build_profile
from ._yamlio import DataFile, load_data_file

__all__ = ["Registry"]


def _entries(location, display: str | None) -> list[tuple[str, str]]:
    """(display path, text) of each *.yaml in a folder or package resource folder."""
    out = []
    for item in sorted(location.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".yaml") and item.is_file():
            shown = f"{display}/{item.name}" if display else str(item)
            out.append((shown, item.read_text(encoding="utf-8")))
    return out


class Registry:
    """Families and profiles from the bundled data (default) or from folders given explicitly.

    ``families_dir`` holds ``<family>.yaml`` files; ``formulas_dir`` holds one folder per
    profile with its ``profile.yaml``. Profiles are loaded on first use and kept on this object.
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
        raw: dict[str, DataFile] = {}
        problems: list[str] = []
        for shown, text in _entries(fam_loc, fam_disp):
            try:
                raw[shown.rsplit("/", 1)[-1].removesuffix(".yaml")] = load_data_file(text, shown, "family-1.schema.json")
            except FileFormatError as e:
                problems.extend(e.problems)
        if problems:
            raise FileFormatError(problems)
        if not raw:
            raise FileFormatError(f"{fam_disp or families_dir}: no family files found")
        self.families: dict[str, Family] = build_families(raw)
        self._by_type = {mt: f for f in self.families.values() for mt in f.model_types}
        self._fallback = next((f for f in self.families.values() if f.fallback), None)
        self._profiles: dict[str, Profile] = {}

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

    def family_for(self, model_types: Iterable[str | None]) -> tuple[Family, str | None]:
        """The family serving the first known model type, else the fallback family and a warning."""
        types = [t for t in model_types if t]
        for t in types:
            if t in self._by_type:
                return self._by_type[t], None
        if self._fallback is None:
            raise VramwiseError(f"no family serves model type {types[0] if types else None!r} and none is marked fallback")
        if types:
            note = f"model type {types[0]!r} has no family; using the generic family {self._fallback.name!r}"
        else:
            note = f"config has no model_type; using the generic family {self._fallback.name!r}"
        return self._fallback, note

    def profile_names(self) -> list[str]:
        return sorted(
            p.name for p in self._formulas.iterdir() if p.is_dir() and p.joinpath("profile.yaml").is_file()
        )

    def profile(self, name: str) -> Profile:
        if name in self._profiles:
            return self._profiles[name]
        names = self.profile_names()
        if name not in names:
            from ._errors import SettingsError

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
        prof = build_profile(manifest, files, self.families)
        self._profiles[name] = prof
        return prof
