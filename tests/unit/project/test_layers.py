"""The package's shape, checked from its source: dependencies point down, no import circles (imports
inside functions and ``importlib.import_module`` of literal names count),
``eval``/``exec``/``compile`` only in the expression language's package, and no subpackage reaching
back up through ``import vramwise``.

The layers, bottom to top (docs/architecture.md draws them)::

    0  vramwise.errors, vramwise.version   the exception tree and the version, importable from anywhere
    1  vramwise.rules                 the rule language and data-file reading (YAML with marks, schemas, limits)
    2  vramwise.inputs                configs, checkpoints, the model and GPU catalogs, sizes written as text
    3  vramwise.models                model reading: family, facts, layer plan, inventory, LoRA, skip lists,
                                      checkpoint formats, the resolved model
    4  vramwise.profiles              profiles and settings: profile files, strategies, settings, bands
    5  vramwise.estimation            the estimate: registry, caches, estimate, explain, recipe, size only
    6  vramwise.tooling               checks of data files, the families' examples
    7  vramwise.gpus                  NVML discovery
    7  vramwise.measuring             measured training steps (ground truth)
    7  vramwise.recipes               training recipes read into settings (formats: frameworks/*.yaml)
    7  vramwise.records               the local database of runs: predicted against measured
    8  vramwise.answers               placement, fit, compare, sweep, plots
    9  vramwise.surfaces              JSON views, the CLI, the server and its page
    9  vramwise.integrations          checks inside training scripts (transformers' Trainer)
    10 vramwise (__init__, cli, __main__)   the public names, the entry points

A module may import its own layer's modules and those of lower layers only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import vramwise

ENGINE = Path(vramwise.__file__).resolve().parent
RANKS = [  # longest prefix first
    ("vramwise.errors", 0),
    ("vramwise.version", 0),
    ("vramwise.rules", 1),
    ("vramwise.inputs", 2),
    ("vramwise.models", 3),
    ("vramwise.profiles", 4),
    ("vramwise.estimation", 5),
    ("vramwise.tooling", 6),
    ("vramwise.gpus", 7),
    ("vramwise.measuring", 7),
    ("vramwise.recipes", 7),
    ("vramwise.records", 7),
    ("vramwise.answers", 8),
    ("vramwise.surfaces", 9),
    ("vramwise.integrations", 9),
    ("vramwise", 10),
]
EVAL_HOME = "vramwise.rules.expr"
#: The one module outside it that compiles and execs: it stands in for exec inside dataclasses, and compiles and runs
#: only the sources dataclasses generates for a class's methods (never text from a data file or a user).
CLASS_CODE = "vramwise.rules.classcode"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ENGINE.rglob("*.py")):
        parts = list(path.relative_to(ENGINE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(["vramwise", *parts])] = path
    return out


MODULES = _modules()


def _rank(module: str) -> int:
    for prefix, rank in RANKS:
        if module == prefix or module.startswith(prefix + "."):
            return rank
    raise AssertionError(f"{module} is in no layer")


def _resolve(name: str) -> str | None:
    """The vramwise module an imported name lands in (the longest module prefix), or None outside vramwise."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in MODULES:
            return cand
        parts.pop()
    return None


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names = [arg.value]
            elif isinstance(arg, ast.JoinedStr) and any(
                    isinstance(v, ast.Constant) and "vramwise" in str(v.value) for v in arg.values):
                found.add(f"<a vramwise module name built from a string at line {node.lineno}>")
        for n in names:
            target = _resolve(n)
            if target and target != module:
                found.add(target)
    return found


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def test_every_module_is_in_a_layer():
    for m in MODULES:
        _rank(m)


def test_no_module_names_another_from_a_string():
    built = {m: sorted(t for t in targets if t.startswith("<")) for m, targets in GRAPH.items()}
    assert not {m: b for m, b in built.items() if b}


def test_dependencies_point_down():
    upward = []
    for m, targets in GRAPH.items():
        for t in targets:
            if t.startswith("<"):
                continue
            if _rank(t) > _rank(m):
                upward.append(f"{m} (layer {_rank(m)}) imports {t} (layer {_rank(t)})")
    assert not upward, "\n".join(sorted(upward))


def test_no_import_circles():
    # Tarjan's strongly connected components: any component with two or more modules is a circle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in GRAPH:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not circles, circles


def test_the_checker_sees_a_circle_and_an_upward_import():
    """The two checks above on a made-up graph: they can fail."""
    saved = dict(GRAPH)
    try:
        GRAPH["vramwise.rules.graph"] = GRAPH["vramwise.rules.graph"] | {"vramwise.surfaces.serve"}
        GRAPH["vramwise.surfaces.serve"] = GRAPH["vramwise.surfaces.serve"] | {"vramwise.rules.graph"}
        for check in (test_dependencies_point_down, test_no_import_circles):
            try:
                check()
            except AssertionError:
                continue
            raise AssertionError(f"{check.__name__} passed a graph with a circle and an upward import")
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


def test_eval_exec_and_compile_only_in_the_expression_language():
    found = []
    for m, p in MODULES.items():
        if m == EVAL_HOME or m.startswith(EVAL_HOME + ".") or m == CLASS_CODE:
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec", "compile"):
                found.append(f"{p.relative_to(ENGINE)}:{node.lineno}: {node.func.id}()")
    assert not found, "\n".join(found)


def test_the_class_code_module_runs_only_what_dataclasses_hands_it():
    """classcode's compile and exec are inside the function it puts in dataclasses' namespace for ``exec``, run on
    the source that function is given, and nowhere else."""
    tree = ast.parse(MODULES[CLASS_CODE].read_text(encoding="utf-8"))
    calls = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec", "compile"):
                    calls.setdefault(node.func.id, set()).add(fn.name)
                    assert isinstance(node.args[0], ast.Name) and node.args[0].id in ("source", "code"), ast.unparse(node)
    assert calls == {"exec": {"_exec"}, "compile": {"_exec"}}


def test_subpackages_do_not_import_the_top_package():
    top = []
    for m, p in MODULES.items():
        if _rank(m) == 10:
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import) and any(a.name == "vramwise" for a in node.names):
                top.append(f"{m}:{node.lineno}: import vramwise")
            elif isinstance(node, ast.ImportFrom) and node.module == "vramwise" and not node.level:
                top.append(f"{m}:{node.lineno}: from vramwise import ...")
    assert not top, "\n".join(top)
