"""``vramwise check``: validate family and formula files before using them.

:func:`check` takes family files (``<family>.yaml``) and profiles (a profile folder, its
``profile.yaml`` or one of its formula files: the whole folder is checked) and returns one
``file:line:col: message`` line per problem, an empty list when everything is fine.

The files are checked as a registry would load them, together with the bundled data: the
bundled families and profiles are copied into a temporary folder and the given files replace
the bundled ones of the same name (so a new family that ``extends: llama`` is checked against
the bundled llama). Then, through :class:`vramwise.Registry` (which validates third-party
files):

- schema and YAML (duplicate keys included), expressions (load-time checks);
- references: ``extends``, facts and layer attributes, formula names and the files a profile
  lists, the facts and attributes each profile needs from each family it serves;
- each ``examples:`` entry of a given family (and of the families that extend it): the family
  chosen, facts, parameters by group, layer attributes and estimate fields, as the test suite
  runs them; a failed expectation is reported at the line of the expected value;
- for a given profile, every family it serves is estimated with the profile's defaults from
  that family's first example config, and the examples whose settings name the profile are run.
"""

from __future__ import annotations

import ast
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Sequence

from vramwise.core.errors import VramwiseError

__all__ = ["check"]

#: the largest family or formula file checked
MAX_DATA_FILE_BYTES = 4 * 2**20


class _Source:
    """One data file to check: where it came from (display) and its text."""

    def __init__(self, display: str, text: str):
        self.display = display
        self.text = text


def _read_text(path: Path, problems: list[str]) -> str | None:
    shown = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_DATA_FILE_BYTES:
            problems.append(f"{shown}:1:1: the file is larger than {MAX_DATA_FILE_BYTES // 2**20} MiB")
            return None
        raw = path.read_bytes()
    except OSError as e:
        problems.append(f"{shown}:1:1: cannot read the file: {e.strerror or e}")
        return None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        problems.append(f"{shown}:1:1: not UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start}): data files are UTF-8 YAML")
        return None


_STRATEGIES = "strategies"  # the folder of the multi-GPU strategies (formulas/strategies), checked like a profile's


def _classify(paths: Sequence[str | os.PathLike]) -> tuple[dict[str, Path], dict[str, Path]]:
    """(family name -> file, profile name -> folder) of the paths given; VramwiseError for a path that is neither."""
    families: dict[str, Path] = {}
    profiles: dict[str, Path] = {}
    for raw in paths:
        path = Path(os.fspath(raw))
        try:
            is_dir, is_file = path.is_dir(), path.is_file()
        except (OSError, ValueError) as e:
            raise VramwiseError(f"cannot read {raw}: {e}") from None
        if is_dir:
            if (path / "strategies.yaml").is_file():  # the multi-GPU strategies folder
                profiles[_STRATEGIES] = path
                continue
            if (path / "profile.yaml").is_file():
                profiles[path.resolve().name] = path
                continue
            yamls = sorted(p for p in path.iterdir() if p.suffix == ".yaml" and p.is_file())
            subs = sorted(p for p in path.iterdir() if p.is_dir() and (p / "profile.yaml").is_file())
            if not yamls and not subs:
                raise VramwiseError(f"{raw}: a folder to check holds family files, a profile.yaml or profile folders")
            for p in yamls:
                families[p.stem] = p
            for p in subs:
                profiles[p.name] = p
        elif is_file:
            if path.suffix not in (".yaml", ".yml"):
                raise VramwiseError(f"{raw}: expected a family or formula file (.yaml) or a profile folder")
            parent = path.resolve().parent
            if path.name == "strategies.yaml" or (parent / "strategies.yaml").is_file():
                profiles[_STRATEGIES] = path.parent if str(path.parent) else Path(".")
            elif path.name == "profile.yaml" or (parent / "profile.yaml").is_file():
                profiles[parent.name] = path.parent if str(path.parent) else Path(".")
            else:
                families[path.name[: -len(path.suffix)]] = path
        else:
            raise VramwiseError(f"no such file or folder: {raw}")
    return families, profiles


def _bundled(package: str):
    return resources.files(package)


def _stage(
    root: Path, families: dict[str, Path], profiles: dict[str, Path], problems: list[str]
) -> tuple[dict[str, str], dict[str, _Source]]:
    """Write the bundled and the given files under ``root``; returns (staged path -> display, family name -> source)."""
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
    given: dict[str, _Source] = {}
    for name, path in families.items():
        text = _read_text(path, problems)
        if text is None:
            continue
        target = fam_dir / f"{name}.yaml"
        target.write_text(text, encoding="utf-8")
        shown[str(target)] = str(path)
        given[name] = _Source(str(path), text)
    for folder in _bundled("vramwise.formulas").iterdir():
        if not folder.is_dir() or folder.name in profiles:
            continue
        if not (folder.joinpath("profile.yaml").is_file() or folder.joinpath("strategies.yaml").is_file()):
            continue
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


class _Arith(ast.NodeVisitor):
    """Plain arithmetic on numbers, as the examples write expected values (no names, bounded powers)."""

    _OPS = {
        ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    }

    def value(self, node: ast.AST):
        if isinstance(node, ast.Expression):
            return self.value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = self.value(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            a, b = self.value(node.left), self.value(node.right)
            if isinstance(node.op, ast.Pow):
                if abs(b) > 256 or abs(a) > 2**64:
                    raise ValueError("power too large")
                return a**b
            op = self._OPS.get(type(node.op))
            if op is not None:
                return op(a, b)
        raise ValueError("only numbers and + - * / // % ** are allowed")


def _expected(v: Any) -> Any:
    if not isinstance(v, str):
        return v
    if len(v) > 1000:
        raise ValueError("expression longer than 1000 characters")
    return _Arith().value(ast.parse(v, mode="eval"))


def _run_example(reg, family: str, example: dict, where, profile: str | None = None) -> list[str]:
    """Problems of one example (``where(parts)`` locates a part of the example)."""
    import vramwise

    name = example.get("name", "?")
    out: list[str] = []

    def fail(parts: tuple, message: str) -> None:
        out.append(f"{where(parts)}: example {name!r}: {message}")

    try:
        fam = reg.family(family)
        if fam.model_types or fam.fallback or fam.abstract:
            spec = vramwise.load_model(example["config"], registry=reg)
        else:
            spec = reg.resolve(example["config"], family=family)
    except VramwiseError as e:
        fail(("config",), _flat(e))
        return out
    expect = example.get("expect") or {}
    if spec.family != expect.get("family", family):
        fail(("expect",), f"family {spec.family!r} was chosen, {expect.get('family', family)!r} expected")
    for fact, value in (expect.get("facts") or {}).items():
        got = spec.facts.get(fact, "(no such fact)")
        if got != value:
            fail(("expect", "facts", fact), f"fact {fact} is {got!r}, expected {value!r}")
    for group, value in (expect.get("params") or {}).items():
        got = spec.params_total if group == "total" else spec.params_by_group.get(group, 0)
        try:
            want = _expected(value)
        except (ValueError, SyntaxError, ArithmeticError) as e:
            fail(("expect", "params", group), f"expected value {value!r} is not plain arithmetic: {e}")
            continue
        if got != want:
            fail(("expect", "params", group), f"params {group} is {got:,}, expected {want:,}")
    for attr, by_value in (expect.get("layers") or {}).items():
        got: dict = {}
        for lc in spec.layer_classes:
            if attr not in lc.attributes:
                break
            got.setdefault(lc.attributes[attr], []).extend(lc.indices)
        else:
            want = {k: sorted(v) for k, v in (by_value or {}).items()}
            have = {k: sorted(v) for k, v in got.items()}
            if have != want:
                fail(("expect", "layers", attr), f"layer attribute {attr} groups the layers as {have}, expected {want}")
            continue
        fail(("expect", "layers", attr), f"no layer attribute {attr}")
    if "estimate" in expect or profile is not None:
        settings = dict(example.get("settings") or {})
        try:
            est = vramwise.estimate(spec, registry=reg, **settings)
        except VramwiseError as e:
            fail(("settings",) if settings else ("config",), _flat(e))
            return out
        for fieldname, value in (expect.get("estimate") or {}).items():
            got = getattr(est, fieldname, "(no such field)")
            try:
                want = _expected(value)
            except (ValueError, SyntaxError, ArithmeticError) as e:
                fail(("expect", "estimate", fieldname), f"expected value {value!r} is not plain arithmetic: {e}")
                continue
            if got != want:
                shown = f"{got:,}" if isinstance(got, int) else repr(got)
                fail(("expect", "estimate", fieldname), f"estimate {fieldname} is {shown}, expected {want!r}")
    return out


def _flat(e: BaseException) -> str:
    problems = getattr(e, "problems", None)
    return "; ".join(problems) if problems else " ".join(str(e).split())


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
    Raises :class:`VramwiseError` for a path that is neither (missing, not YAML).
    """
    from vramwise.core.registry import Registry
    from vramwise.core.datafiles import load_data_file

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise VramwiseError("nothing to check: give family files or profile folders")
    families, profiles = _classify(paths)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="vramwise-check-") as tmp:
        root = Path(tmp)
        shown, given = _stage(root, families, profiles, problems)
        try:
            reg = Registry(root / "families", root / "formulas")
        except VramwiseError as e:
            return problems + _relocate(_problems_of(e), shown)
        except (OSError, UnicodeDecodeError) as e:  # pragma: no cover - the files were staged just now
            return problems + [f"{tmp}: {e}"]
        problems.extend(_relocate(_check_registry(reg, given, set(profiles), load_data_file), shown))
    seen: set = set()
    return [p for p in problems if not (p in seen or seen.add(p))]


def _check_registry(reg, given: dict[str, _Source], user_profiles: set[str], load_data_file) -> list[str]:
    problems: list[str] = []
    compiled: dict[str, Any] = {}
    broken: set[str] = set()
    for name in sorted(reg._files):  # noqa: SLF001 - every family, so an override that breaks a child shows
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
    except VramwiseError as e:
        problems.extend(_problems_of(e))
    from vramwise.core.profile import check_inputs

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
        src = given.get(fname)
        if src is not None:
            try:
                df = load_data_file(src.text, src.display, "family-1.schema.json")
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
            problems.extend(_run_example(reg, fname, ex, lambda parts, i=i, w=where: w(parts, i)))
    # a given profile: estimate each family it serves, and run the examples that name it
    for pname in sorted(user_profiles & prof_objs.keys()):
        import vramwise

        prof = prof_objs[pname]
        for fname, fam in compiled.items():
            if not prof.serves(fam) or not fam.examples:
                continue
            cfg = fam.examples[0].get("config")
            try:
                if fam.model_types or fam.fallback or fam.abstract:
                    spec = vramwise.load_model(cfg, registry=reg)
                else:
                    spec = reg.resolve(cfg, family=fname)
                if spec.family != fname:
                    continue
                vramwise.estimate(spec, registry=reg, profile=pname)
            except VramwiseError as e:
                problems.extend(f"{p} (profile {pname}, family {fname}, its first example's config)"
                                for p in _problems_of(e))
            for i, ex in enumerate(fam.examples):
                if (ex.get("settings") or {}).get("profile") == pname and fname not in given:
                    problems.extend(_run_example(
                        reg, fname, ex, lambda parts, i=i, fam=fam: f"{fam.file}:1:1: $.examples[{i}]", profile=pname))
    return problems


def _ancestors_named(reg, name: str) -> set[str]:
    """Names on the ``extends`` chain of a family file, read without compiling it."""
    out: set[str] = set()
    files = reg._files  # noqa: SLF001
    current = name
    for _ in range(64):
        try:
            parent = files[current].data.get("extends")
        except (VramwiseError, KeyError):
            break
        if not isinstance(parent, str) or parent in out:
            break
        out.add(parent)
        current = parent
    return out
