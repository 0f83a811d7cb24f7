"""Running one case of a target (inside the sandbox worker) and judging it with the oracle."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import shutil
import stat
import sys
import types
from pathlib import Path

import vramwise

from . import generators as G
from .oracle import Insane, Outcome, check_estimate, classify, strict_json

_RANK = {"ok": 0, "error": 1, "finding": 2}


def worst(outcomes: list[Outcome]) -> Outcome:
    return max(outcomes, key=lambda o: _RANK[o.status]) if outcomes else Outcome("ok")


def _estimate_and_check(call, data_under_test: bool = False) -> Outcome:
    try:
        e = call()
        check_estimate(e)
        _ = e.warnings, e.peak_phase, repr(e)
        return Outcome("ok")
    except BaseException as exc:  # noqa: BLE001 - the oracle judges every exception
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return classify(exc, data_under_test)


# ---------------------------------------------------------------------------------------------
def run_configs(case: dict, registry=None) -> Outcome:
    out = []
    for profile, settings in case["runs"]:
        out.append(_estimate_and_check(
            lambda: vramwise.estimate(case["config"], profile=profile, registry=registry, **settings)))
    return worst(out)


def run_settings(case: dict) -> Outcome:
    settings = dict(case["settings"])
    if case["kind"] == "from_size":
        kw = {k: case[k] for k in ("params", "weight_bytes") if k in case}
        return _estimate_and_check(lambda: vramwise.estimate_from_size(**kw, **settings))
    if "profile" in case:
        settings["profile"] = case["profile"]
    return _estimate_and_check(lambda: vramwise.estimate(case["config"], **settings))


# ---------------------------------------------------------------------------------------------
_ATTRIBUTE_LEAK = ("<class '", "<built-in", "<function", "<bound method", "<module", "<method", "<slot wrapper",
                   "<attribute", "mappingproxy(")


class DataDirs:
    """A private copy (symbolic links) of the bundled family and formula folders; one file replaced per case."""

    def __init__(self, root: str):
        self.root = Path(root) / f"data-{os.getpid()}"
        if self.root.exists():
            shutil.rmtree(self.root)
        (self.root / "families").mkdir(parents=True)
        for p in sorted(G.FAMILIES_DIR.glob("*.yaml")):
            os.symlink(p, self.root / "families" / p.name)
        for p in sorted(G.FORMULAS_DIR.glob("*/*.yaml")):
            d = self.root / "formulas" / p.parent.name
            d.mkdir(parents=True, exist_ok=True)
            os.symlink(p, d / p.name)

    @contextlib.contextmanager
    def replaced(self, rel: str, text: str):
        target = self.root / rel
        original = os.readlink(target) if target.is_symlink() else None
        if original is not None:
            target.unlink()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            yield
        finally:
            target.unlink()
            if original is not None:
                os.symlink(original, target)


def run_data_files(case: dict, dirs: DataDirs) -> Outcome:
    with dirs.replaced(case["path"], case["text"]):
        try:
            reg = vramwise.Registry(dirs.root / "families", dirs.root / "formulas")
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return classify(exc, data_under_test=True)
        probe = case["probe"]
        out = []
        for profile, settings in probe["runs"]:
            if probe["kind"] == "from_size":
                call = lambda: vramwise.estimate_from_size(params=probe["params"], registry=reg, **settings)  # noqa: E731
            else:
                call = lambda: vramwise.estimate(probe["config"], profile=profile, registry=reg, **settings)  # noqa: E731

            def checked():
                e = call()
                for w in e.warnings:
                    if not isinstance(w, str):
                        raise Insane("warning", f"warning {w!r} is not text")
                    if len(w) > 10000:
                        raise Insane("warning", f"a warning of {len(w)} characters")
                    if any(m in w for m in _ATTRIBUTE_LEAK):
                        raise Insane("template-attribute", f"a warning shows an object read through a template: {w[:200]!r}")
                return e

            out.append(_estimate_and_check(checked, data_under_test=True))
        return worst(out)


# ---------------------------------------------------------------------------------------------
def _can_deny_reading() -> bool:
    """Whether chmod 000 keeps this process out of a folder (not as root)."""
    import tempfile

    d = tempfile.mkdtemp()
    try:
        Path(d, "f").write_text("x")
        os.chmod(d, 0)
        try:
            Path(d, "f").read_text()
            return False
        except PermissionError:
            return True
    finally:
        os.chmod(d, 0o700)
        shutil.rmtree(d)


CAN_DENY = None


def _example_text() -> str:
    return G.EXAMPLE.read_text()


def make_file(spec: dict, path: Path) -> None:
    """Write the bad file (or folder) ``spec`` at ``path``."""
    global CAN_DENY
    kind = spec["kind"]
    base = json.loads(_example_text())
    if kind == "config":
        path.write_text(_example_text())
    elif kind == "config_mut":
        try:
            path.write_text(json.dumps(spec["config"]))
        except (ValueError, TypeError):
            path.write_text(repr(spec["config"]))
    elif kind == "non_utf8":
        path.write_bytes(b'{"model_type": "llama", "name": "\xff\xfe\xc3\x28"}')
    elif kind == "utf16":
        path.write_bytes(_example_text().encode("utf-16"))
    elif kind == "utf8_bom":
        path.write_bytes(b"\xef\xbb\xbf" + _example_text().encode())
    elif kind == "huge_int":
        path.write_text(json.dumps({**base, "vocab_size": 0})[:-1].replace('"vocab_size": 0', '"vocab_size": ' + "9" * spec["n"]) + "}")
    elif kind == "deep_list":
        path.write_text("[" * spec["n"] + "]" * spec["n"])
    elif kind == "deep_dict":
        path.write_text('{"a": ' * spec["n"] + "1" + "}" * spec["n"])
    elif kind == "empty":
        path.write_text("")
    elif kind == "folder":
        path.mkdir()
    elif kind == "folder_config_dir":
        (path / "config.json").mkdir(parents=True)
    elif kind == "folder_weights":
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + b"\x00" * 1000)
    elif kind == "folder_with_config":
        path.mkdir()
        (path / "config.json").write_text(_example_text())
    elif kind == "folder_index_deep":
        path.mkdir()
        (path / "config.json").write_text(_example_text())
        (path / "model.safetensors.index.json").write_text('{"metadata": ' + "[" * spec["n"] + "]" * spec["n"] + "}")
    elif kind == "folder_index_bad":
        path.mkdir()
        (path / "config.json").write_text(_example_text())
        try:
            text = json.dumps({"metadata": {"total_size": spec["total_size"]}, "weight_map": {}})
        except (TypeError, ValueError):
            text = "{}"
        (path / "model.safetensors.index.json").write_text(text)
    elif kind == "not_object":
        path.write_text(spec["text"])
    elif kind == "big":
        pad = " " * (spec["n"] * 2**20)
        path.write_text('{"pad": "' + "x" * 100 + '",' + pad + _example_text().strip()[1:])
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 40)
    elif kind == "symlink_loop":
        os.symlink(path, path)
    elif kind == "unreadable":
        if CAN_DENY is None:
            CAN_DENY = _can_deny_reading()
        path.mkdir()
        (path / "config.json").write_text(_example_text())
        os.chmod(path, 0)  # as root this denies nothing; the case is then an ordinary folder
    else:
        raise ValueError(f"unknown file kind {kind!r}")


def _guard_measure() -> None:
    """Make ``vramwise measure`` fail loudly instead of building a model, should an argv ever get that far."""
    mod = types.ModuleType("vramwise.measuring.steps")

    def measure(*a, **k):
        raise RuntimeError("fuzz harness: measure reached (argv must fail before a model is built)")

    mod.measure = measure
    sys.modules["vramwise.measuring.steps"] = mod


def run_cli(case: dict, workdir: Path) -> Outcome:
    from vramwise.surfaces.cli.main import main

    if workdir.exists():
        _rmtree(workdir)
    workdir.mkdir(parents=True)
    paths = {}
    for name, spec in case["files"].items():
        p = workdir / name
        make_file(spec, p)
        paths[name] = str(p)
    argv = []
    for tok in case["argv"]:
        for name, p in paths.items():
            if tok.startswith("@" + name):
                tok = p + tok[len(name) + 1:]
        argv.append(tok)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code if e.code is not None else 0
        if code not in (0, 2):
            return Outcome("finding", f"exit:{code!r}", f"exit status {code!r}; stderr: {err.getvalue()[-300:]}")
        if code == 0 and "--json" in argv and argv and argv[0] in ("estimate", "explain", "select", "families", "gpus") \
                and "--help" not in argv:
            try:
                strict_json(out.getvalue())
            except ValueError as e:
                return Outcome("finding", "insane:json-output", f"--json printed invalid JSON: {e}")
        return Outcome("ok" if code == 0 else "error", "" if code == 0 else "exit 2",
                       err.getvalue().strip().splitlines()[-1][:300] if code and err.getvalue().strip() else "")
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        return classify(exc)
    finally:
        _rmtree(workdir)


def _rmtree(p: Path) -> None:
    if not os.path.lexists(p):
        return
    for root, dirs, _ in os.walk(p):
        for d in dirs:
            try:
                os.chmod(os.path.join(root, d), stat.S_IRWXU)
            except OSError:
                pass
    try:
        os.chmod(p, stat.S_IRWXU)
    except OSError:
        pass
    shutil.rmtree(p, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
class Runner:
    """Runs cases of every target in this process (the sandbox worker makes one)."""

    def __init__(self, scratch: str):
        self.scratch = Path(scratch)
        self._dirs = None
        _guard_measure()

    @property
    def dirs(self) -> DataDirs:
        if self._dirs is None:
            self._dirs = DataDirs(str(self.scratch))
        return self._dirs

    def run(self, target: str, case: dict) -> Outcome:
        if target == "configs":
            return run_configs(case)
        if target == "settings":
            return run_settings(case)
        if target == "cli":
            return run_cli(case, self.scratch / f"cli-{os.getpid()}")
        if target == "data_files":
            return run_data_files(case, self.dirs)
        raise ValueError(f"unknown target {target!r}")


def warm_up() -> None:
    """Load what every case needs once (before the worker forks), so no case pays for first imports."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    cfg = json.loads(_example_text())
    for profile, settings in G.RUNS:
        try:
            vramwise.estimate(cfg, profile=profile, **settings).to_dict()
        except vramwise.VramwiseError:
            pass
    vramwise.estimate_from_size(params=8e9)
    importlib.import_module("vramwise.surfaces.cli.main")
    vramwise.Registry.default().families
    # what a hub id or a file's first read imports: paid once per process, not by a case
    for mod in ("jsonschema", "huggingface_hub", "transformers"):
        try:
            __import__(mod)
        except ImportError:
            pass
    try:
        from transformers import AutoConfig  # noqa: F401
    except ImportError:
        pass
    G.base_configs(), G.field_names()
