"""``vramwise check``: validate family and formula files before using them.

:func:`check` takes family files (``<family>.yaml``) and profiles (a profile folder, its
``profile.yaml`` or one of its formula files: the whole folder is checked; the folder of formula
files several profiles share, ``formulas/shared``, is checked the same way) and returns one
``file:line:col: message`` line per problem, an empty list when everything is fine.

The files are checked as a registry would load them, together with the bundled data: the
bundled families and profiles are copied into a temporary folder and the given files replace
the bundled ones of the same name (so a new family that ``extends: llama`` is checked against
the bundled llama). Then, through :class:`vramwise.Registry` (which validates third-party
files):

- schema and YAML (duplicate keys included), expressions (load-time checks);
- references: ``extends``, facts and layer attributes, formula names and the files a profile
  lists, the facts and attributes each profile needs from each family it serves (given family
  files alone compile the families they reach: themselves and the families that extend them);
- each ``examples:`` entry of a given family (and of the families that extend it): the family
  chosen, facts, parameters by group, layer attributes and estimate fields, as the test suite
  runs them; a failed expectation is reported at the line of the expected value;
- for a given profile, every family it serves is estimated with the profile's defaults from
  that family's first example config, and the examples whose settings name the profile are run,
  and so are the profile's test cases (``cases.yaml``: figures derived by hand, with a tolerance);
- the settings vocabularies and rules (``formulas/settings.yaml``), the stacks manifest
  (``formulas/stacks.yaml``) and checkpoint formats, given by path: schema, the vocabularies'
  cross-references (the values a stack setting names are that setting's) and expressions.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from vramwise.rules.datafiles import MAX_FILE_BYTES, load_data_file, package_files, read_data_text
from vramwise.errors import FileFormatError, UsageError, VramwiseError
from vramwise.estimation.estimate import estimate, load_model, needs_stored_checkpoint
from vramwise.tooling.cases import read_cases, run_cases
from vramwise.tooling.examples import run_example
from vramwise.profiles.profile import check_inputs
from vramwise.estimation.registry import Registry
from vramwise.profiles.settings import DEFAULTS

__all__ = ["check"]


@dataclass(frozen=True)
class _GivenFile:
    """A family file given to check: its path as the user wrote it, and its text."""

    display: str
    text: str


def _read_text(path: Path, problems: list[str]) -> str | None:
    """The text of a given data file (a byte-order mark dropped), or None with its problem added."""
    try:
        return read_data_text(path, str(path)).removeprefix("\ufeff")
    except FileFormatError as e:
        problems.extend(e.problems)
        return None


_STRATEGIES = "strategies"  # the folder of the multi-GPU strategies (formulas/strategies), checked like a profile's
_COMPONENT_LINE = re.compile(r"^component:", re.M)


def _shared_formulas(folder: Path) -> bool:
    """Whether ``folder`` holds formula files several profiles list (formulas/shared): no manifest of its
    own, and YAML files with a top-level ``component:`` (checked like a profile's folder)."""
    try:
        if (folder / "profile.yaml").is_file() or (folder / "strategies.yaml").is_file():
            return False
        return any(_COMPONENT_LINE.search(p.read_text(encoding="utf-8", errors="replace")) is not None
                   for p in folder.iterdir()
                   if p.suffix == ".yaml" and p.is_file() and p.stat().st_size <= MAX_FILE_BYTES)
    except OSError:
        return False


def _classify(paths: Sequence[str | os.PathLike]) -> tuple[dict[str, Path], dict[str, Path], list[Path]]:
    """(family name -> file, profile name -> folder, the data files of their own kind a folder holds: settings,
    stacks, checkpoint formats, GGUF tables) of the paths given; UsageError for a path that is neither."""
    families: dict[str, Path] = {}
    profiles: dict[str, Path] = {}
    own_kind: list[Path] = []
    for raw in paths:
        path = Path(os.fspath(raw))
        try:
            is_dir, is_file = path.is_dir(), path.is_file()
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot read {raw}: {e}") from None
        if is_dir:
            if (path / "strategies.yaml").is_file():  # the multi-GPU strategies folder
                profiles[_STRATEGIES] = path
                continue
            if (path / "profile.yaml").is_file() or _shared_formulas(path):
                profiles[path.resolve().name] = path
                continue
            yamls = sorted(p for p in path.iterdir() if p.suffix == ".yaml" and p.is_file())
            subs = sorted(p for p in path.iterdir() if p.is_dir() and (p / "profile.yaml").is_file())
            if not yamls and not subs:
                raise UsageError(f"{raw}: a folder to check holds family files, a profile.yaml or profile folders")
            for p in yamls:
                if p.name in _FORMATS:  # formulas/settings.yaml, stacks.yaml, ...: checked by their own schema
                    own_kind.append(p)
                else:
                    families[p.stem] = p
            for p in subs:
                profiles[p.name] = p
        elif is_file:
            if path.suffix not in (".yaml", ".yml"):
                raise UsageError(f"{raw}: expected a family or formula file (.yaml) or a profile folder")
            parent = path.resolve().parent
            if path.name == "strategies.yaml" or (parent / "strategies.yaml").is_file():
                profiles[_STRATEGIES] = path.parent if str(path.parent) else Path(".")
            elif path.name == "profile.yaml" or (parent / "profile.yaml").is_file() or _shared_formulas(parent):
                profiles[parent.name] = path.parent if str(path.parent) else Path(".")
            else:
                families[path.name[: -len(path.suffix)]] = path
        else:
            raise UsageError(f"no such file or folder: {raw}")
    return families, profiles, own_kind


def _bundled(package: str):
    return package_files(package)


def _stage(
    root: Path, families: dict[str, Path], profiles: dict[str, Path], problems: list[str]
) -> tuple[dict[str, str], dict[str, _GivenFile]]:
    """Write the bundled and the given files under ``root``; returns (staged path -> display, family name -> given file)."""
    shown: dict[str, str] = {}
    fam_dir = root / "families"
    form_dir = root / "formulas"
    fam_dir.mkdir()
    form_dir.mkdir()
    for item in _bundled("vramwise.families").iterdir():
        if item.name.endswith(".yaml") and item.is_file() and item.name[:-5] not in families:
            target = fam_dir / item.name
            target.write_text(item.read_text(encoding="utf-8"), encoding="utf-8")
            shown[str(target)] = f"families/{item.name}"
    stacks = _bundled("vramwise.families").joinpath("stacks")
    for folder in (stacks.iterdir() if stacks.is_dir() else ()):  # the stack overlays: families/stacks/<stack>/*.yaml
        if not folder.is_dir():
            continue
        (fam_dir / "stacks" / folder.name).mkdir(parents=True)
        for item in folder.iterdir():
            if item.name.endswith(".yaml") and item.is_file():
                target = fam_dir / "stacks" / folder.name / item.name
                target.write_text(item.read_text(encoding="utf-8"), encoding="utf-8")
                shown[str(target)] = f"families/stacks/{folder.name}/{item.name}"
    given: dict[str, _GivenFile] = {}
    for name, path in families.items():
        text = _read_text(path, problems)
        if text is None:
            continue
        target = fam_dir / f"{name}.yaml"
        target.write_text(text, encoding="utf-8")
        shown[str(target)] = str(path)
        given[name] = _GivenFile(str(path), text)
    for folder in _bundled("vramwise.formulas").iterdir():
        if not folder.is_dir() or folder.name in profiles:
            continue
        if not any(item.name.endswith(".yaml") for item in folder.iterdir()):
            continue  # (profiles, the strategies and formulas/shared: every folder of formula files is staged)
        (form_dir / folder.name).mkdir()
        for item in folder.iterdir():
            if item.name.endswith(".yaml") and item.is_file():
                target = form_dir / folder.name / item.name
                target.write_text(item.read_text(encoding="utf-8"), encoding="utf-8")
                shown[str(target)] = f"formulas/{folder.name}/{item.name}"
    for name, folder in profiles.items():
        (form_dir / name).mkdir()
        for item in sorted(folder.iterdir()):
            if item.suffix == ".yaml" and item.is_file():
                text = _read_text(item, problems)
                if text is None:
                    continue
                target = form_dir / name / item.name
                target.write_text(text, encoding="utf-8")
                shown[str(target)] = str(item)
    return shown, given


def _problems_of(e: VramwiseError) -> list[str]:
    problems = getattr(e, "problems", None)
    return list(problems) if problems else [" ".join(str(e).split())]


def _relocate(lines: Iterable[str], shown: dict[str, str]) -> list[str]:
    """Replace staged paths by the paths the user knows, longest first."""
    keys = sorted(shown, key=len, reverse=True)
    out = []
    for line in lines:
        for k in keys:
            if k in line:
                line = line.replace(k, shown[k])
        out.append(line)
    return out


def check(paths: Sequence[str | os.PathLike] | str | os.PathLike) -> list[str]:
    """Check family and formula files; one ``file:line:col: message`` per problem ([] when all are fine).

    ``paths``: family files, profile folders, or files of a profile folder (see the module's doc).
    Raises :class:`UsageError` for a path that is neither (missing, not YAML).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise UsageError("nothing to check: give family files or profile folders")
    formats = [p for p in paths if Path(os.fspath(p)).name in _FORMATS]
    problems: list[str] = [q for p in formats for q in _check_formats(Path(os.fspath(p)))]
    paths = [p for p in paths if p not in formats]
    if not paths:
        return problems
    families, profiles, own_kind = _classify(paths)
    problems += [q for p in own_kind for q in _check_formats(p)]
    if not families and not profiles:
        return problems
    with tempfile.TemporaryDirectory(prefix="vramwise-check-") as tmp:
        root = Path(tmp)
        shown, given = _stage(root, families, profiles, problems)
        try:
            # no family file given: the bundled families themselves (validated, as a staged copy would be), so that
            # the registry of each such check takes the families compiled by an earlier one (Registry's _COMPILED)
            reg = Registry(root / "families" if given else None, root / "formulas", validate=True)
        except VramwiseError as e:
            return problems + _relocate(_problems_of(e), shown)
        except (OSError, UnicodeDecodeError) as e:  # pragma: no cover - the files were staged just now
            return problems + [f"{tmp}: {e}"]
        problems.extend(_relocate(_check_registry(reg, given, set(profiles), root / "formulas"), shown))
    seen: set = set()
    return [p for p in problems if not (p in seen or seen.add(p))]


#: The data files checked by their own schema and compiler rather than through a registry: name -> schema.
_FORMATS = {"checkpoint_formats.yaml": "checkpoint-formats-1.schema.json", "settings.yaml": "settings-1.schema.json",
            "stacks.yaml": "stacks-1.schema.json", "gguf.yaml": "gguf-1.schema.json",
            "ollama.yaml": "preset-1.schema.json"}


def _check_formats(path: Path) -> list[str]:
    """The problems of a checkpoint-formats file, a settings-rules file or a stacks manifest: its schema,
    its cross-references and its expressions."""
    from vramwise.inputs.gguf import compile_tables
    from vramwise.inputs.presets import compile_preset
    from vramwise.models.checkpoint_formats import compile_formats
    from vramwise.models.stack_manifest import compile_manifest
    from vramwise.profiles.settings import compile_settings_file

    compile_file = {"settings.yaml": compile_settings_file, "stacks.yaml": compile_manifest,
                    "gguf.yaml": compile_tables, "ollama.yaml": compile_preset}.get(path.name, compile_formats)
    try:
        df = load_data_file(read_data_text(path, str(path)), str(path), _FORMATS[path.name])
        compile_file(df)
    except VramwiseError as e:
        return _problems_of(e)
    return _stack_values(df) if path.name == "stacks.yaml" else []


def _stack_values(df) -> list[str]:
    """The values a stacks manifest names that are not its setting's (runnable names, substitutions' values and
    what they run), and the settings it names that have no closed vocabulary, one ``file:line:col`` each."""
    from vramwise.profiles.settings import SETTINGS
    from vramwise.rules.datafiles import json_path

    choices = {s.name: tuple(s.choices) for s in SETTINGS if s.choices}
    problems = []

    def check(parts: tuple, value: str, known, what: str, key: bool = False) -> None:
        if value not in known:
            problems.append(f"{df.key_where(parts) if key else df.where(parts)}: {json_path(parts)}: {value!r} is not "
                            f"{what} ({', '.join(known)})")

    for section in ("runnable", "substitutions"):
        for setting, body in df.data[section].items():
            check((section, setting), setting, tuple(choices), "a setting with choices", key=True)
            if setting not in choices:
                continue
            what = f"one of {setting}'s choices"
            if section == "runnable":
                for i, value in enumerate(body["names"]):
                    check((section, setting, "names", i), value, choices[setting], what)
                continue
            for value, spec in body.items():
                check((section, setting, value), value, choices[setting], what, key=True)
                check((section, setting, value, "runs"), spec["runs"], choices[setting], what)
    return problems


def _check_registry(reg: Registry, given: dict[str, _GivenFile], user_profiles: set[str],
                    formulas: Path | None = None) -> list[str]:
    problems: list[str] = []
    compiled: dict[str, Any] = {}
    broken: set[str] = set()
    names = reg.family_names()
    if not user_profiles & set(reg.profile_names()):
        # Family files alone (or formula files no profile is named by: formulas/shared, the strategies): the
        # families they reach are the given ones and those that extend them (an override that breaks a child
        # shows); every other family is a bundled file left as it is, whose check is the bundled files' own. A
        # profile folder given is checked against every family it serves.
        names = [n for n in names if n in given or given.keys() & _ancestors_named(reg, n)] if given else []
    for name in names:
        try:
            compiled[name] = reg.family(name)
        except VramwiseError as e:
            broken.add(name)
            if name in given or not given.keys() & _ancestors_named(reg, name):
                problems.extend(_problems_of(e))
            else:  # a bundled child of a given family: its problem is the given file's
                problems.extend(f"{p} (family {name} extends a family checked)" for p in _problems_of(e))
    prof_objs: dict[str, Any] = {}
    for pname in reg.profile_names():
        try:
            prof_objs[pname] = reg.profile(pname)
        except VramwiseError as e:
            problems.extend(_problems_of(e))
    try:  # every strategy compiled with every profile it names (those given or not, a strategy reads their names)
        for sname in reg.strategy_names():
            for pname in reg.strategy_info(sname)["profiles"]:
                if pname in prof_objs:
                    reg.profile(pname, sname)
        reg.strategy_shards_in_order()  # the advice's strategy changes name strategies and offloads of the manifest
    except VramwiseError as e:
        problems.extend(_problems_of(e))
    for pname, prof in prof_objs.items():
        for fname, fam in compiled.items():
            if (pname in user_profiles or fname in given or given.keys() & set(fam.parents)) and prof.serves(fam):
                problem = check_inputs(prof, fam)
                if problem:
                    problems.append(problem)
    # the examples of the given families and of the families that extend them
    for fname, fam in compiled.items():
        if fname not in given and not (given.keys() & set(fam.parents)):
            continue
        given_file = given.get(fname)
        if given_file is not None:
            try:
                df = load_data_file(given_file.text, given_file.display, "family-1.schema.json")
            except VramwiseError as e:
                problems.extend(_problems_of(e))
                continue
            examples = df.data.get("examples") or []

            def where(parts, i, df=df):
                return df.where(("examples", i) + parts)
        else:
            examples = list(fam.examples)

            def where(parts, i, fam=fam):
                return f"{fam.file}:1:1: $.examples[{i}]"
        for i, ex in enumerate(examples):
            problems.extend(run_example(reg, fname, ex, lambda parts, i=i, w=where: w(parts, i)))
    # a given profile: estimate each family it serves, and run the examples that name it
    for pname in sorted(user_profiles & prof_objs.keys()):
        prof = prof_objs[pname]
        for fname, fam in compiled.items():
            if needs_stored_checkpoint(prof):  # a GGUF file's profile (llama.cpp): no config.json to estimate from
                break
            if not prof.serves(fam) or not fam.examples:
                continue
            cfg = fam.examples[0].get("config")
            try:
                if fam.model_types or fam.fallback or fam.abstract:
                    spec = load_model(cfg, registry=reg)
                else:
                    spec = reg.resolve(cfg, family=fname)
                if spec.family != fname:
                    continue
                estimate(spec, registry=reg, profile=pname, **_profile_defaults(prof))
            except VramwiseError as e:
                problems.extend(f"{p} (profile {pname}, family {fname}, its first example's config)"
                                for p in _problems_of(e))
            for i, ex in enumerate(fam.examples):
                if (ex.get("settings") or {}).get("profile") == pname and fname not in given:
                    problems.extend(run_example(
                        reg, fname, ex, lambda parts, i=i, fam=fam: f"{fam.file}:1:1: $.examples[{i}]", profile=pname))
        if formulas is not None:  # the profile's test cases (formulas/<profile>/cases.yaml)
            try:
                cases = read_cases(formulas, None, pname)
            except VramwiseError as e:
                problems.extend(_problems_of(e))
            else:
                problems.extend(run_cases(reg, cases) if cases is not None else ())
    return problems


#: The GPU a serving profile is checked on (an H100 SXM as CUDA reports it: hardware/gpus.yaml).
_CHECK_GPU_BYTES = 85_029_615_043


def _profile_defaults(prof) -> dict:
    """Settings for estimating with ``prof`` as its own defaults would: its first method where it does not
    model the default one, and a GPU's memory for a serving profile that requires one."""
    out: dict = {} if DEFAULTS["method"] in prof.methods else {"method": prof.methods[0]}
    if prof.serving is not None:
        out["gpu_memory"] = _CHECK_GPU_BYTES
    return out


def _ancestors_named(reg: Registry, name: str) -> set[str]:
    """Names on the ``extends`` chain of a family file, read without compiling it."""
    out: set[str] = set()
    current = name
    for _ in range(64):
        try:
            parent = reg.family_file(current).data.get("extends")
        except VramwiseError:
            break
        if not isinstance(parent, str) or parent in out:
            break
        out.add(parent)
        current = parent
    return out
