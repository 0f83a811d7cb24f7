"""The multi-GPU strategies folder (``formulas/strategies``): its manifest and formula files.

``strategies.yaml`` names each strategy with its summary, source, formula files and offload
settings, whether its GPUs each run a micro-batch (``data_parallel``), the profiles the strategies are
modelled on, the formulas that become the reported figures, and the strategy changes fit's advice
proposes (``advice.shards_in_order``, checked against the strategies and their offloads). A strategy's files are evaluated on top of a profile's formulas
(:class:`~vramwise.profiles.profile.Overlay`). Everything is read once, through the data-file
reader (its size and UTF-8 limits), and kept.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from vramwise.rules.datafiles import DataFile, load_data_file, read_folder
from vramwise.errors import FileFormatError, SettingsError
from vramwise.profiles.profile import Overlay

__all__ = ["StrategyFolder"]


class StrategyFolder:
    """The strategies folder of a formulas root (``display``: the root as shown, else by its path)."""

    def __init__(self, formulas: Any, display: str | None, validate: bool):
        self.folder = formulas.joinpath("strategies")
        self.display = f"{display}/strategies" if display else None
        self.validate = validate
        self._manifest: DataFile | None = None
        self._texts: dict[str, str] = {}  # display path -> text of each file of the folder
        self._files: dict[str, DataFile] = {}
        self._infos: dict[str, Mapping] = {}
        self._shards: tuple | None = None

    def _shown(self, fname: str) -> str:
        return f"{self.display}/{fname}" if self.display else str(self.folder.joinpath(fname))

    def present(self) -> bool:
        """Whether the formulas root has a strategies manifest."""
        return self.folder.joinpath("strategies.yaml").is_file()

    def manifest(self) -> DataFile:
        """strategies.yaml, and the texts of its folder, read once."""
        if self._manifest is None:
            path = self._shown("strategies.yaml")
            if not self.present():
                raise SettingsError(f"{path}: no multi-GPU strategies in this formulas folder")
            self._texts = dict(read_folder(self.folder, self.display))
            self._manifest = load_data_file(self._texts[path], path, "strategies-1.schema.json", validate=self.validate)
        return self._manifest

    def names(self) -> list[str]:
        """The strategies of the manifest (none without one)."""
        return list(self.manifest().data["strategies"]) if self.present() else []

    def info(self, strategy: str) -> Mapping[str, Any]:
        """The manifest entry of ``strategy`` (summary, source, files, offload settings) and the profiles it
        serves (read-only, built once)."""
        got = self._infos.get(strategy)
        if got is None:
            man = self.manifest().data
            if strategy not in man["strategies"]:
                raise SettingsError(f"unknown strategy {strategy!r} (available: none, {', '.join(man['strategies'])})")
            entry = man["strategies"][strategy]
            served = tuple(entry.get("profiles", man["profiles"]))
            stray = [p for p in served if p not in man["profiles"]]
            if stray:
                raise FileFormatError(self.manifest().problem(
                    ("strategies", strategy, "profiles"),
                    f"profile(s) {', '.join(stray)} not among the manifest's profiles ({', '.join(man['profiles'])})"))
            stray = [p for p in (entry.get("variants") or {}) if p not in served]
            if stray:
                raise FileFormatError(self.manifest().problem(
                    ("strategies", strategy, "variants"),
                    f"variant(s) for {', '.join(stray)}, which the strategy does not serve ({', '.join(served)})"))
            got = self._infos[strategy] = MappingProxyType(dict(entry, profiles=served))
        return got

    def shards_in_order(self) -> tuple[tuple[str, str], ...]:
        """The (strategy, offload) changes fit's advice proposes to shard the model states, mildest first
        (``advice.shards_in_order``; none without a manifest or without that list). Each names a strategy
        of the manifest and one of its offload settings, once; else FileFormatError at the entry."""
        if self._shards is None:
            if not self.present():
                self._shards = ()
                return self._shards
            man = self.manifest()
            strategies = man.data["strategies"]
            pairs, problems = [], []
            for i, entry in enumerate((man.data.get("advice") or {}).get("shards_in_order") or ()):
                strategy, offload = entry.get("strategy"), entry.get("offload")
                at = ("advice", "shards_in_order", i)
                if strategy not in strategies:
                    problems.append(man.problem(at + ("strategy",), f"{strategy!r} is not a strategy of the manifest "
                                                                   f"({', '.join(strategies)})"))
                elif offload not in strategies[strategy].get("offload", ()):
                    problems.append(man.problem(at + ("offload",), f"{strategy} does not offload {offload!r} (its "
                                                                  f"offload: {', '.join(strategies[strategy]['offload'])})"))
                elif (strategy, offload) in pairs:
                    problems.append(man.problem(at, f"{strategy} with offload {offload} is listed twice"))
                else:
                    pairs.append((strategy, offload))
            if problems:
                raise FileFormatError(problems)
            self._shards = tuple(pairs)
        return self._shards

    def step(self, profile: str) -> Mapping[str, Any]:
        """The manifest's ``steps`` entry of ``profile`` (its step files, the methods its stack runs on
        several GPUs); empty when it has none."""
        return (self.manifest().data.get("steps") or {}).get(profile, {})

    def overlay(self, strategy: str, profile: str) -> Overlay:
        """What ``strategy`` adds to ``profile``: the profile's step files and the strategy's formula files
        (each loaded once), its outputs, and the methods the profile's stack runs on several GPUs."""
        info = self.info(strategy)
        man = self.manifest()
        variant = (info.get("variants") or {}).get(profile)
        step = {} if info.get("own_step") or variant else self.step(profile)
        files = tuple(variant["files"]) if variant else tuple(step.get("files", ())) + tuple(info["files"])
        problems, extra = [], []
        for fname in files:
            shown = self._shown(fname)
            if shown not in self._texts:
                problems.append(man.problem(("strategies", strategy, "files"), f"listed file {fname!r} does not exist"))
                continue
            if shown not in self._files:
                try:
                    self._files[shown] = load_data_file(self._texts[shown], shown, "formulas-1.schema.json",
                                                        validate=self.validate)
                except FileFormatError as e:
                    problems.extend(e.problems)
                    continue
            extra.append(self._files[shown])
        if problems:
            raise FileFormatError(problems)
        entry = man.data["strategies"][strategy]
        if variant:
            outputs, parts = variant["outputs"], ("strategies", strategy, "variants", profile, "outputs")
        elif "outputs" in entry:
            outputs, parts = entry["outputs"], ("strategies", strategy, "outputs")
        else:
            outputs, parts = man.data["outputs"], ("outputs",)
        return Overlay(strategy, tuple(extra), man, parts, outputs, () if variant else tuple(entry.get("ranks", ())),
                       tuple(step["methods"]) if "methods" in step else None, step.get("methods_note", ""))
