#!/usr/bin/env python
"""The command outputs shown in README.md and docs/*.md, regenerated from the commands themselves.

A *console block* is a fenced code block whose first line is ``$ vramwise ...`` or
``$ python benchmarks/NAME.py ...``: each ``$ `` line of the block is a command (a line ending in
`` \\`` continues on the next), and the lines after it, up to the next ``$ `` line, are that
command's output. This script runs every command (the repo root as the working directory, in this
process, through ``vramwise.surfaces.cli.main.main`` or the benchmark script's ``main(argv)``, which
returns the exit status, with standard output and standard error captured together, as a terminal
shows them) and rewrites the output lines of the block. The output does not depend on the terminal:
the CLI wraps at a fixed 100 columns.

A comment on the last non-blank line before the fence (a blank line between the comment and the
fence keeps Markdown renderers from swallowing the fence into the comment) says how the block
shows the outputs; without one, each command's whole output is shown:

``<!-- vramwise-output: SPEC -->``
    one ``SPEC`` per command of the block, separated by ``;`` (an empty one: the whole output).
    A ``SPEC`` is a comma-separated list of ranges of output lines, each ``FROM`` or
    ``FROM..`` (to the end) or ``FROM..TO``; ``FROM``/``TO`` is a line number (1 is the first
    output line) or ``/regex/`` (the first line at or after the previous range that matches it,
    Python's ``re.search``), either with an offset ``+N``/``-N`` in lines. The lines between
    ranges, before the first and after the last, are shown as one line ``...``. An item
    ``exit=N`` says the command exits with status N (an error shown on purpose); any other
    status but 0 is an error of the block.
``<!-- vramwise-output: not run: REASON -->``
    the block is left as it is, because its output is not reproducible here (a local database of
    the user's runs). Keep these few.

A command may end in one pipe (``vramwise ... | grep -A3 '^kv_cache_bytes'``): the output of
vramwise is fed to the rest, run as a program (no shell).

Normalisations, so that an output depends on the code and data only:

- ``HF_HUB_OFFLINE=1``: no network; a hub id must come from the offline catalog;
- ``CUDA_VISIBLE_DEVICES`` unset, and NVML (the GPU driver's library, ``vramwise gpus`` and
  ``vramwise select``) answers as on a machine without NVIDIA's driver:
  ``NVMLError_LibraryNotFound``; the other discovery backends answer as on a Linux x86_64 machine
  without their tools and libraries (no ``amdsmi``, ``amd-smi``, ``rocm-smi``, ``xpu-smi``; torch
  not loaded).

Usage::

    python scripts/build_doc_outputs.py            # rewrites the stale blocks, names the files
    python scripts/build_doc_outputs.py --check    # exit 1 and name each stale block, write nothing

tests/unit/project/test_doc_outputs.py runs the check.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
REGENERATE = "python scripts/build_doc_outputs.py"
MARKER = re.compile(r"^<!--\s*vramwise-output:\s*(.*?)\s*-->\s*$")
#: a command of a console block: ``vramwise ...`` or a benchmark script run by its ``main(argv)``
COMMAND = re.compile(r"^\$ (?:vramwise\b|python benchmarks/[\w-]+\.py\b)")
SCRIPT = re.compile(r"^benchmarks/[\w-]+\.py$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
ELISION = "..."


def doc_files(root: Path = REPO) -> list[Path]:
    """README.md and every page of docs/, in a stable order."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


class BlockError(Exception):
    """A console block this script cannot regenerate (a bad marker, a failing command)."""


@dataclass
class Command:
    lines: list[str]  # the command as written (continuation lines included)
    shown: list[str]  # the output lines the block shows now
    spec: str = ""

    @property
    def text(self) -> str:
        joined = " ".join(ln.rstrip().removesuffix("\\").strip() for ln in self.lines)
        return joined.removeprefix("$").strip()


@dataclass
class Block:
    path: Path
    start: int  # 0-based index of the first line inside the fence
    end: int  # 0-based index of the closing fence
    commands: list[Command] = field(default_factory=list)
    skip: str | None = None


def find_blocks(path: Path, lines: list[str]) -> list[Block]:
    """Every console block of a page (lines without their newlines)."""
    blocks = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        close = next((j for j in range(i + 1, len(lines))
                      if lines[j].strip().startswith(m.group(2)) and not lines[j].strip().strip(m.group(2)[0])),
                     len(lines))
        body = lines[i + 1:close]
        if body and body[0].startswith(" ") and COMMAND.match(body[0].lstrip()):
            raise BlockError(f"{path.name}:{i + 2}: an indented console block (in a list item?) is not "
                             f"generated: put it at the start of the line")
        if body and COMMAND.match(body[0]):
            block = Block(path, i + 1, close)
            prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            marker = MARKER.match(prev.strip())
            specs = [""]
            if marker:
                text = marker.group(1)
                if text.startswith("not run"):
                    block.skip = text
                else:
                    specs = [s.strip() for s in text.split(";")]
            k = 0
            while k < len(body):
                cmd = [body[k]]
                while cmd[-1].rstrip().endswith("\\") and k + 1 < len(body):
                    k += 1
                    cmd.append(body[k])
                k += 1
                out = []
                while k < len(body) and not body[k].startswith("$ "):
                    out.append(body[k])
                    k += 1
                block.commands.append(Command(cmd, out))
            if not block.skip:
                if len(specs) == 1 and len(block.commands) > 1 and not specs[0]:
                    specs = specs * len(block.commands)
                if len(specs) != len(block.commands):
                    raise BlockError(f"{path.name}:{i + 2}: the marker gives {len(specs)} output specs "
                                     f"for {len(block.commands)} commands")
                for c, s in zip(block.commands, specs):
                    c.spec = s
            blocks.append(block)
        i = close + 1
    return blocks


# ---- the selection of output lines -----------------------------------------------------------------

_ENDPOINT = r"(?:\d+|/(?:[^/\\]|\\.)*/)(?:[+-]\d+)?"
_ITEM = re.compile(rf"^(?:exit=(?P<exit>\d+)|(?P<from>{_ENDPOINT})(?P<range>\.\.(?P<to>{_ENDPOINT})?)?)$")


def _split_items(spec: str) -> list[str]:
    items, cur, in_re, esc = [], "", False, False
    for ch in spec:
        if esc:
            cur, esc = cur + ch, False
        elif ch == "\\":
            cur, esc = cur + ch, True
        elif ch == "/":
            cur, in_re = cur + ch, not in_re
        elif ch == "," and not in_re:
            items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        items.append(cur.strip())
    return items


def _endpoint(text: str, out: list[str], at: int, spec: str) -> int:
    """The 0-based line an endpoint names, searching regexes from line ``at``."""
    m = re.match(r"^(\d+|/((?:[^/\\]|\\.)*)/)([+-]\d+)?$", text)
    if m.group(2) is not None:
        rx = re.compile(m.group(2).replace("\\/", "/"))
        line = next((j for j in range(at, len(out)) if rx.search(out[j])), None)
        if line is None:
            raise BlockError(f"no output line at or after line {at + 1} matches {text!r} (spec {spec!r})")
    else:
        line = int(m.group(1)) - 1
    line += int(m.group(3) or 0)
    if not 0 <= line < len(out):
        raise BlockError(f"{text!r} names line {line + 1}, outside the output's {len(out)} lines (spec {spec!r})")
    return line


def parse_spec(spec: str) -> tuple[list[str], int]:
    """The range items of a spec and the exit status it expects."""
    ranges, status = [], 0
    for item in _split_items(spec):
        m = _ITEM.match(item)
        if not m:
            raise BlockError(f"bad item {item!r} in output spec {spec!r}")
        if m.group("exit") is not None:
            status = int(m.group("exit"))
        else:
            ranges.append(item)
    return ranges, status


def select(out: list[str], spec: str) -> list[str]:
    """The lines a spec shows, with ``...`` for each run of lines left out."""
    ranges, _ = parse_spec(spec)
    if not ranges:
        return list(out)
    shown, at = [], 0
    for item in ranges:
        m = _ITEM.match(item)
        lo = _endpoint(m.group("from"), out, at, spec)
        if m.group("range") is None:
            hi = lo
        elif m.group("to") is None:
            hi = len(out) - 1
        else:
            hi = _endpoint(m.group("to"), out, lo, spec)
        if lo < at or hi < lo:
            raise BlockError(f"range {item!r} goes backwards (spec {spec!r})")
        if lo > at:
            shown.append(ELISION)
        shown.extend(out[lo:hi + 1])
        at = hi + 1
    if at < len(out):
        shown.append(ELISION)
    return shown


# ---- running a command -----------------------------------------------------------------------------

class _NoNvml:
    """NVML as on a machine without NVIDIA's driver: what ``pynvml.nvmlInit`` raises there."""

    def __init__(self):
        import pynvml
        self._error = pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def init(self):
        raise self._error


def _no_tool(argv, timeout=None):
    """A command of the discovery backends, as on a machine without it."""
    from vramwise.gpus.backends import ToolResult

    return ToolResult("", f"{argv[0]} not found")


def _no_amdsmi():
    raise ImportError("No module named 'amdsmi'")


@contextlib.contextmanager
def _environment(root: Path):
    env = {"HF_HUB_OFFLINE": "1"}
    saved = {k: os.environ.get(k) for k in (*env, "CUDA_VISIBLE_DEVICES")}
    cwd = os.getcwd()
    os.environ.update(env)
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    os.chdir(root)
    try:
        with mock.patch("vramwise.gpus.discovery.PynvmlBackend", _NoNvml), \
                mock.patch("vramwise.gpus.backends.run_tool", _no_tool), \
                mock.patch("vramwise.gpus.backends._load_amdsmi", _no_amdsmi), \
                mock.patch("vramwise.gpus.backends._loaded_torch_xpu", lambda: None), \
                mock.patch("vramwise.gpus.backends.host_system", lambda: ("Linux", "x86_64")):
            yield
    finally:
        os.chdir(cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _script_main(path: str):
    """The ``main`` of a benchmark script (``benchmarks/NAME.py`` under the working directory), loaded afresh."""
    import importlib.util

    name = f"_doc_output_{Path(path).stem}"
    spec = importlib.util.spec_from_file_location(name, Path.cwd() / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    try:
        spec.loader.exec_module(module)
    except FileNotFoundError:
        raise BlockError(f"no script {path}") from None
    if not callable(getattr(module, "main", None)):
        raise BlockError(f"{path} has no main(argv)")
    return module.main


def _run_main(main, args: list[str]) -> int:
    try:
        status = main(args)
    except SystemExit as e:  # argparse's errors and --help
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return status or 0


def run_command(text: str) -> tuple[int, str]:
    """Run ``vramwise ARGS [| PROGRAM ARGS]`` or ``python benchmarks/NAME.py ARGS [| ...]`` in this process;
    (exit status, stdout and stderr)."""
    from vramwise.surfaces.cli.main import main

    lex = shlex.shlex(text, posix=True, punctuation_chars="|")
    lex.whitespace_split = True
    tokens = list(lex)
    stages, cur = [], []
    for t in tokens:
        if t == "|":
            stages.append(cur)
            cur = []
        else:
            cur.append(t)
    stages.append(cur)
    if any(not s for s in stages):
        raise BlockError(f"not a vramwise command: {text!r}")
    if stages[0][0] == "vramwise":
        args = stages[0][1:]
    elif stages[0][0] == "python" and len(stages[0]) > 1 and SCRIPT.match(stages[0][1]):
        main, args = _script_main(stages[0][1]), stages[0][2:]
    else:
        raise BlockError(f"not a vramwise command: {text!r}")
    buf = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # a warning shown by an earlier command is shown again
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            status = _run_main(main, args)
    output = buf.getvalue()
    for stage in stages[1:]:
        done = subprocess.run(stage, input=output, capture_output=True, text=True, check=False)
        output = done.stdout + done.stderr
    return status, output


# ---- blocks ------------------------------------------------------------------------------------

def render(block: Block, root: Path) -> list[str]:
    """The block's lines inside the fence, regenerated."""
    lines = []
    for c in block.commands:
        _, expected = parse_spec(c.spec)
        status, output = run_command(c.text)
        if status != expected:
            tail = output.strip().splitlines()[-1:] or ["(no output)"]
            raise BlockError(f"`{c.text}` exited with status {status}, not {expected}: {tail[0]}")
        out = output.splitlines()
        lines.extend(c.lines)
        lines.extend(select(out, c.spec))
    return lines


@dataclass(frozen=True)
class Stale:
    where: str  # file:line of the block's first command
    command: str
    first_difference: str

    def __str__(self) -> str:
        return f"{self.where}: `{self.command}`: {self.first_difference}"


def _first_difference(now: list[str], new: list[str], first_line: int) -> str:
    for k, (a, b) in enumerate(zip(now, new)):
        if a != b:
            return f"line {first_line + k}: the page shows {a!r}, the command prints {b!r}"
    k = min(len(now), len(new))
    if len(now) > len(new):
        return f"line {first_line + k}: the page shows {now[k]!r}, the command prints nothing more"
    return f"line {first_line + k}: the page ends, the command prints {new[k]!r} more"


def process(paths: list[Path], root: Path = REPO, write: bool = False) -> tuple[list[Stale], list[str]]:
    """Stale blocks and errors of the pages; with ``write``, stale blocks are rewritten."""
    stale, errors = [], []
    with _environment(root):
        for path in paths:
            rel = path.relative_to(root)
            lines = path.read_text(encoding="utf-8").split("\n")
            try:
                blocks = find_blocks(path, lines)
            except BlockError as e:
                errors.append(f"{rel.parent / str(e)}")
                continue
            changed = False
            for block in reversed(blocks):  # rewriting from the end keeps earlier indices valid
                if block.skip:
                    continue
                where = f"{rel}:{block.start + 1}"
                try:
                    new = render(block, root)
                except BlockError as e:
                    errors.append(f"{where}: {e}")
                    continue
                now = lines[block.start:block.end]
                if now != new:
                    stale.append(Stale(where, block.commands[0].text, _first_difference(now, new, block.start + 1)))
                    if write:
                        lines[block.start:block.end] = new
                        changed = True
            if changed:
                path.write_text("\n".join(lines), encoding="utf-8")
    stale.sort(key=lambda s: (s.where.split(":")[0], int(s.where.split(":")[1])))
    return stale, errors


# ---- the module map of docs/architecture.md -------------------------------------------------------

ARCHITECTURE = "docs/architecture.md"
MAP_BEGIN = "<!-- module map: generated by python scripts/build_doc_outputs.py from each module's docstring -->"
MAP_END = "<!-- end of the module map -->"
LAYERS_TEST = "tests/unit/project/test_layers.py"


def layer_ranks(root: Path = REPO) -> list[tuple[str, int]]:
    """``RANKS`` of tests/unit/project/test_layers.py (package prefix, layer), read from its source."""
    tree = ast.parse((root / LAYERS_TEST).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "RANKS" for t in node.targets):
            return [tuple(x) for x in ast.literal_eval(node.value)]
    raise BlockError(f"{LAYERS_TEST}: no RANKS")


def first_sentence(doc: str | None) -> str:
    """A docstring's first sentence as Markdown: ``x`` and :role:`x` become `x`, ``|`` becomes ``/``."""
    if not doc:
        return "—"
    text = " ".join(doc.strip().split("\n\n")[0].split())
    m = re.match(r"^(.*?[.!?])(?=\s|$)", text)
    text = m.group(1) if m else text
    text = re.sub(r":\w+:`([^`<]+?)\s*<[^`>]+>`", r"`\1`", text)  # :meth:`shown <target>`
    text = re.sub(r":\w+:`~[\w.]*?(\w+)`", r"`\1`", text)
    text = re.sub(r":\w+:`([^`]+)`", r"`\1`", text)
    return text.replace("``", "`").replace("|", "/")


def module_map(root: Path = REPO) -> list[str]:
    """The table of every module of engine/, grouped by package in layer order, bottom first."""
    engine = root / "engine"
    ranks = layer_ranks(root)

    def rank(package: str) -> int:
        return next((r for p, r in ranks if package == p or package.startswith(p + ".")), 99)

    groups: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(engine.rglob("*.py")):
        rel = path.relative_to(engine)
        package = ".".join(["vramwise", *rel.parent.parts])
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        if rel.name == "__init__.py" and rel.parent.parts and not doc:
            continue  # a subpackage's empty __init__: nothing to say
        if not rel.parent.parts and rel.stem in ("errors", "version"):
            package = f"vramwise.{rel.stem}"  # layer 0: modules of their own
        groups.setdefault(package, []).append((rel.name, first_sentence(doc)))
    lines = ["", "| package | module | responsibility |", "|---|---|---|"]
    for package in sorted(groups, key=lambda p: (rank(p), p)):
        for k, (name, text) in enumerate(groups[package]):
            lines.append(f"| {f'`{package}`' if k == 0 else ''} | `{name}` | {text} |")
    return [*lines, ""]  # blank lines around the table: Markdown would read it into the comments


def layer_problems(lines: list[str], root: Path = REPO) -> list[str]:
    """Differences between the diagram under "## Layers" and ``RANKS``: each with the page's line."""
    start = next((k for k, ln in enumerate(lines) if ln.strip() == "## Layers"), None)
    if start is None:
        return [f"{ARCHITECTURE}: no '## Layers' section"]
    fence = next(k for k in range(start, len(lines)) if FENCE.match(lines[k]))
    close = next(k for k in range(fence + 1, len(lines)) if FENCE.match(lines[k]))
    ranks = dict(layer_ranks(root))
    drawn: dict[str, tuple[int, int]] = {}  # package -> (layer, line number)
    text_of: dict[int, str] = {}
    for k in range(fence + 1, close):
        m = re.match(r"^\s*(\d+)\s+(vramwise[\w.]*)", lines[k])
        if m:
            drawn[m.group(2)] = (int(m.group(1)), k + 1)
            text_of[int(m.group(1))] = text_of.get(int(m.group(1)), "") + lines[k]
    problems = []
    for package, (layer, line) in drawn.items():
        if package not in ranks:
            problems.append(f"{ARCHITECTURE}:{line}: {package} is drawn in layer {layer} "
                            f"but is not in {LAYERS_TEST}'s RANKS")
        elif ranks[package] != layer:
            problems.append(f"{ARCHITECTURE}:{line}: {package} is drawn in layer {layer}, "
                            f"RANKS puts it in {ranks[package]}")
    for package, layer in ranks.items():
        if package not in drawn and not re.search(rf"\b{re.escape(package)}\b", text_of.get(layer, "")):
            problems.append(f"{ARCHITECTURE}:{fence + 1}: {package} (layer {layer} in RANKS) is not drawn in its layer")
    return problems


def process_module_map(root: Path = REPO, write: bool = False) -> tuple[list[Stale], list[str]]:
    path = root / ARCHITECTURE
    lines = path.read_text(encoding="utf-8").split("\n")
    errors = layer_problems(lines, root)
    try:
        begin, end = lines.index(MAP_BEGIN), lines.index(MAP_END)
    except ValueError:
        return [], errors + [f"{ARCHITECTURE}: the module map's markers are missing ({MAP_BEGIN!r} ... {MAP_END!r})"]
    now, new = lines[begin + 1:end], module_map(root)
    if now == new:
        return [], errors
    if write:
        lines[begin + 1:end] = new
        path.write_text("\n".join(lines), encoding="utf-8")
    return [Stale(f"{ARCHITECTURE}:{begin + 2}", "the module map", _first_difference(now, new, begin + 2))], errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report stale blocks, write nothing (exit 1 if any)")
    ap.add_argument("files", nargs="*", type=Path, help="pages to process (default: README.md and docs/*.md)")
    args = ap.parse_args(argv)
    paths = [p.resolve() for p in args.files] or doc_files()
    stale, errors = process(paths, write=not args.check)
    if not args.files or REPO / ARCHITECTURE in paths:
        more_stale, more_errors = process_module_map(write=not args.check)
        stale, errors = stale + more_stale, errors + more_errors
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    for s in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {s}")
    if args.check and stale:
        print(f"regenerate with: {REGENERATE}")
    return 1 if errors or (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
