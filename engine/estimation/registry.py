"""The registry: families and profiles, each validated and compiled when first used.

Creating a registry reads every family file once and indexes the model types each serves
(:mod:`~vramwise.models.family_index`); a family is validated against its schema and compiled
(with its parents) the first time an estimate needs it, and a profile the first time it is
named (:mod:`~vramwise.profiles.profile_files`, with a strategy's formulas from
:mod:`~vramwise.profiles.strategies`). Resolved models, estimate stages and normalised settings are
kept in bounded caches (:mod:`~vramwise.estimation.caches`). ``check_all`` loads everything, as the
test suite does.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable

from vramwise.estimation.caches import BoundedCache, config_key, json_like, same_config
from vramwise.rules.datafiles import DataFile, package_files, read_folder
from vramwise.errors import ConfigError, FileFormatError, SettingsError, UnknownFamilyError
from vramwise.models.family import Family, compile_family
from vramwise.models.family_index import OWN_KEYS, FamilyFiles, build_index, read_head
from vramwise.profiles.profile import Profile, build_profile, check_inputs
from vramwise.profiles.profile_files import read_profile
from vramwise.profiles.strategies import StrategyFolder

__all__ = ["Registry"]

#: The bundled families compiled, across registries, by what compiles them: (digest of every family file's and stack
#: overlay's display path and text, validated or not, family name) -> Family. A family's compile reads nothing
#: else, so a registry of the bundled families (``vramwise check`` of a profile folder builds one for each check,
#: Registry.reset_default another) takes the families compiled already instead of compiling the 151 again.
#: Families from a folder given are compiled by their registry (what Registry.check_all of such a folder checks).
_COMPILED = BoundedCache(1024)


def _files_digest(texts: dict, overlays: dict) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for part in (sorted(texts.items()), sorted(overlays.items())):
        h.update(b"\2")
        for key, (shown, text) in part:
            for item in ((key,) if isinstance(key, str) else key) + (shown, text):
                h.update(item.encode("utf-8", "surrogatepass") + b"\0" + str(len(item)).encode() + b"\1")
    return h.digest()


def _stack_overlays(fam_loc, fam_disp: str | None) -> dict:
    """(stack, family) -> (display path, text) of the stack overlays under ``stacks/<stack>/`` of a
    families folder (none when it has no ``stacks`` folder)."""
    stacks = fam_loc.joinpath("stacks")
    if not stacks.is_dir():
        return {}
    out = {}
    for folder in sorted(stacks.iterdir(), key=lambda p: p.name):
        if folder.is_dir():
            shown = f"{fam_disp}/stacks/{folder.name}" if fam_disp else None
            for path, text in read_folder(folder, shown):
                out[(folder.name, path.rsplit("/", 1)[-1].removesuffix(".yaml"))] = (path, text)
    return out


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
            fam_loc, fam_disp = package_files("vramwise.families"), "families"
        else:
            fam_loc, fam_disp = Path(families_dir), None
        self._families_location = fam_loc  # (its files' bytes key the check of check_all)
        if formulas_dir is None:
            self._formulas, self._formulas_display = package_files("vramwise.formulas"), "formulas"
        else:
            self._formulas, self._formulas_display = Path(formulas_dir), None
        # the bundled files are validated by the test suite; files from elsewhere on every load
        self.validate = validate if validate is not None else not (families_dir is None and formulas_dir is None)
        texts = {shown.rsplit("/", 1)[-1].removesuffix(".yaml"): (shown, text) for shown, text in read_folder(fam_loc, fam_disp)}
        if not texts:
            raise FileFormatError(f"{fam_disp or families_dir}: no family files found")
        overlays = _stack_overlays(fam_loc, fam_disp)
        self._files = FamilyFiles(texts, self.validate, overlays)
        # (keys _COMPILED)
        self._files_key = (_files_digest(texts, overlays), self.validate) if families_dir is None else None
        self._compiled: dict[str, Family] = {}
        self._profiles: dict[str, Profile] = {}
        self._profile_parts: dict[str, tuple] = {}  # profile -> (manifest, formula files), to add a strategy's
        self._strategies = StrategyFolder(self._formulas, self._formulas_display, self.validate)
        self._with_strategy: dict[tuple, Profile] = {}  # (profile, strategy) -> compiled
        #: resolved models by config content or file identity, static estimate stages, normalised settings
        self.models = BoundedCache(256)
        self.stages = BoundedCache(1024)
        self.settings = BoundedCache(1024)
        # which family serves each model type, and the fallback: the top-level entries only (a file the
        # split cannot read is parsed whole; a loaded family is checked against the index when it is compiled)
        self._by_type, self._fallback = build_index(self._files)

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
    def family_names(self) -> list[str]:
        """Every family of the registry, in name order (none compiled)."""
        return sorted(self._files)

    def family_entries(self, name: str, *keys: str) -> dict:
        """The top-level entries ``keys`` of family ``name``'s own file (those it has), read without composing,
        validating or compiling it. For the entries a family does not inherit (:data:`OWN_KEYS
        <vramwise.models.family_index.OWN_KEYS>`: ``model_types``, ``fallback``, ``abstract``, ``examples``,
        ``reference``) they are the compiled family's values, for the cost of a YAML parse of those entries."""
        if name not in self._files:
            raise UnknownFamilyError(f"unknown family {name!r} (known: {', '.join(sorted(self._files))})")
        unknown = [k for k in keys if k not in OWN_KEYS]
        if unknown:
            raise ValueError(f"{unknown}: not entries a family's own file decides (those are {', '.join(OWN_KEYS)})")
        head = read_head(self._files.text(name), self._files.shown(name), keys=keys)
        if head is None:  # the file cannot be parsed: its problem, with its position
            data = self._files[name].data
            head = {k: data[k] for k in keys if k in data}
        return head

    def family_file(self, name: str) -> DataFile:
        """The loaded (not compiled) file of family ``name``."""
        if name not in self._files:
            raise UnknownFamilyError(f"unknown family {name!r} (known: {', '.join(sorted(self._files))})")
        return self._files[name]

    def family(self, name: str) -> Family:
        """The compiled family ``name`` (validated with its parents on first use)."""
        if name not in self._compiled:
            if name not in self._files:
                raise UnknownFamilyError(f"unknown family {name!r} (known: {', '.join(sorted(self._files))})")
            key = self._files_key + (name,) if self._files_key is not None else None
            fam = _COMPILED.get(key) if key is not None else None
            if fam is None:  # (one compiled from the same files passed the index check below)
                fam = compile_family(name, self._files, self._files.overlays)
                indexed = sorted(t for t, owner in self._by_type.items() if owner == name)
                if sorted(set(fam.model_types)) != indexed or fam.fallback != (self._fallback == name):
                    raise FileFormatError(self._files[name].problem(
                        ("model_types",), "model_types or fallback differ between the file and the model-type index "
                        "(a line at column 0 inside a multi-line value?)"))
                if key is not None:
                    _COMPILED.put(key, fam)
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
            raise UnknownFamilyError(f"no family serves model type {types[0] if types else None!r} and none is marked fallback")
        if types:
            note = f"model type {types[0]!r} has no family; using the generic family {self._fallback!r}"
        else:
            note = f"config has no model_type; using the generic family {self._fallback!r}"
        return self.family(self._fallback), note

    # -- models -------------------------------------------------------------------------
    def model(self, model: Any, *, trust_remote_code: bool = False):
        """The resolved model of a model as given (config path, folder, mapping, PretrainedConfig, hub id).

        A mapping is resolved once per content, a local file once per version (its size and
        modification time, and those of the weights' index and folder); hub ids are read each time.
        """
        key = config_key(model)
        if key is not None:
            hit = self.models.get(key)
            if hit is not None and (hit[1] is None or same_config(hit[1], model)):
                return hit[0]
        from vramwise.inputs.config import read_config  # (after the cache: an import statement costs every hit)

        root, origin = read_config(model, trust_remote_code=trust_remote_code)
        spec = self.resolve(root, origin=origin, location=model)
        if key is not None:
            snapshot = None
            if key[0] == "mapping" and not json_like(model):
                # repr identifies JSON data exactly; other objects are compared with a copy on each hit
                try:
                    snapshot = copy.deepcopy(model)
                except Exception:  # noqa: BLE001 - an uncopyable mapping is simply not kept
                    return spec
            self.models.put(key, (spec, snapshot))
        return spec

    def resolve(self, root: Mapping, *, family: str | None = None, origin: str = "mapping", location: Any = None,
                warnings: Iterable[str] = (), checkpoint_bytes: int | None = None, source: Any = None,
                checkpoint_origin: str | None = None, checkpoint_as_stored: str | None = None,
                stored_placement: Any = None):
        """Resolve a config mapping against its family (chosen by model type unless ``family`` names one).

        ``origin``: where the config was read from, as reported; ``location``: the path it was read from,
        where the checkpoint's size is looked for (``source`` is the former name of ``location``). A checkpoint
        read elsewhere (a GGUF header sent as bytes) comes as ``checkpoint_bytes`` with its ``checkpoint_origin``,
        ``checkpoint_as_stored`` (its format) and ``stored_placement``, as :func:`~vramwise.models.resolve.resolve_model`
        takes them."""
        if location is None:
            location = source
        from vramwise.models.resolve import resolve_model
        from vramwise.inputs.config import checkpoint_source, stored_placement as placement_of, text_view

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
        size_origin, stored, placement = checkpoint_origin, checkpoint_as_stored, stored_placement
        if location is not None and checkpoint_bytes is None:
            checkpoint_bytes, size_origin, stored = checkpoint_source(location)
            if stored is not None:
                placement = placement_of(location)
        return resolve_model(
            fam, root, text, model_type=model_type, warnings=notes, origin=origin,
            checkpoint_bytes=checkpoint_bytes, checkpoint_origin=size_origin, checkpoint_as_stored=stored,
            stored_placement=placement,
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
        manifest, files = read_profile(self._formulas, self._formulas_display, name, self.validate)
        prof = build_profile(manifest, files)
        self._profiles[name] = prof
        self._profile_parts[name] = (manifest, files)
        return prof

    # -- strategies -------------------------------------------------------------------------
    def strategy_names(self) -> list[str]:
        """The multi-GPU strategies of the formulas folder (none when it has no strategies manifest)."""
        return self._strategies.names()

    def strategy_info(self, strategy: str) -> Mapping[str, Any]:
        """The manifest entry of ``strategy`` (summary, source, files, offload settings) and the profiles it
        serves (read-only, built once)."""
        return self._strategies.info(strategy)

    def strategy_shards_in_order(self) -> tuple[tuple[str, str], ...]:
        """The (strategy, offload) changes fit's advice proposes to shard the model states, mildest first (the
        manifest's ``advice.shards_in_order``, each checked against the strategies and their offloads)."""
        return self._strategies.shards_in_order()

    def strategies_of(self, profile: str) -> list[str]:
        """The strategies modelled on ``profile``."""
        return [s for s in self.strategy_names() if profile in self.strategy_info(s)["profiles"]]

    def _strategy_profile(self, name: str, strategy: str) -> Profile:
        key = (name, strategy)
        got = self._with_strategy.get(key)
        if got is not None:
            return got
        info = self.strategy_info(strategy)
        if name not in info["profiles"]:
            served = info["profiles"]
            raise SettingsError(f"strategy {strategy} is modelled on the {', '.join(served)} "
                                f"profile{'s' if len(served) > 1 else ''}, not on {name}: use --profile "
                                f"{served[0]}" + (f" (profile {name} models: {', '.join(theirs)})" if (
                                    theirs := self.strategies_of(name)) else ""))
        self.profile(name)
        manifest, files = self._profile_parts[name]
        prof = build_profile(manifest, files, self._strategies.overlay(strategy, name))
        self._with_strategy[key] = prof
        return prof

    def check_all(self) -> None:
        """Load and cross-check every family, every profile and every strategy with its profiles.

        The digest of the data files' bytes is kept when they pass (:mod:`~vramwise.estimation.checked`):
        files with the same bytes, as validated, pass again at once without compiling anything; an edited,
        added or removed file is checked again."""
        from vramwise.estimation.checked import CHECKED, folder_digest

        digest = folder_digest(self._families_location, self._formulas)
        if CHECKED.passed(digest, self.validate):
            return
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
        self.strategy_shards_in_order()
        if problems:
            raise FileFormatError(problems)
        if folder_digest(self._families_location, self._formulas) == digest:  # not edited while checked
            CHECKED.add(digest, self.validate)
