#!/usr/bin/env python3
"""Write accuracy/bands.yaml: the validated error of each cell of the validation matrices, by profile,
method and multi-GPU strategy, which every estimate carries (``Estimate.error_band``).

    python scripts/build_accuracy_bands.py                       # measure every cell of every matrix (half an hour or more on 2 cores)
    python scripts/build_accuracy_bands.py --matrix strategies   # measure one matrix again, keep the others' entries
    python scripts/build_accuracy_bands.py --check               # no measuring: the file's cell keys and counts against the matrices
    python scripts/build_accuracy_bands.py --rewrite             # no measuring: the file and its docs table written again from the file

The cells are those of benchmarks/validation_matrices.py and benchmarks/strategy_matrices.py, measured by ``Matrix.run_cell`` as
tests/measured asserts them and benchmarks/accuracy.py reports them in docs/accuracy.md (which writes
this file too, from the same rows). An entry pools the cells of one (profile, method, strategy): how
many, the median and the largest |estimate / measured - 1|, the world sizes, the matrices, and the date
and commit they were measured at. The profiles and methods no matrix measures are written with why.

The table of docs/error-bands.md (below its marker) is written with the file. ``--check`` needs no
torch: it lists the cells of the matrices and compares each key's count with the file, and the page's
table with the file (tests/unit/profiles/test_accuracy_bands.py runs it); a matrix that gains cells (a strategy
on another profile) makes it fail until the file is written again.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "accuracy" / "bands.yaml"
DOCS = REPO / "docs" / "error-bands.md"
#: where the generated table of docs/error-bands.md starts
DOCS_MARKER = "<!-- the bands: python scripts/build_accuracy_bands.py -->"
sys.path.insert(0, str(REPO / "benchmarks"))

#: what no matrix measures, and why (written into the file as it is)
UNMEASURED = (
    ("profile", "unsloth", "Unsloth's kernels run on CUDA GPUs only; checked against its published context-length "
                           "tables instead (docs/unsloth-profile.md#stack-check)"),
    ("profile", "studio", "it reproduces the reference estimator"),
    ("profile", "size_only", "a share of the model size, for when no config can be read"),
    ("method", "inference", "the validation matrices measure training steps only; the vllm profile is checked "
                            "against published vLLM start-up logs instead (docs/serving.md#accuracy)"),
)

HEADER = """\
# Validated error of vramwise's estimates, by profile x method x multi-GPU strategy.
#
# Written by `python scripts/build_accuracy_bands.py` (or benchmarks/accuracy.py) from the cells of
# benchmarks/validation_matrices.py, each measured by `vramwise measure` on CPU and estimated: the
# error of a cell is estimate tensor_peak / measured peak - 1 (as docs/accuracy.md lists them). Do not
# edit by hand. Schema: schemas/accuracy-1.schema.json; what the figures mean: docs/error-bands.md.
"""


def all_matrices() -> dict:
    """Every validation matrix by name: MATRICES of benchmarks/validation_matrices.py and the matrices of
    benchmarks/strategy_matrices.py (the strategies of the other stacks, QLoRA's kbit preparation)."""
    from validation_matrices import MATRICES, Matrix

    out = dict(MATRICES)
    try:
        import strategy_matrices
    except ModuleNotFoundError:
        return out
    for name in strategy_matrices.__all__:
        m = getattr(strategy_matrices, name)
        if isinstance(m, Matrix):
            out[m.name] = m
    return out


def cell_key(matrix, cell) -> tuple:
    """(profile, method, strategy, compile) of a cell: the matrix's profile (or the cell's, where a matrix
    gives ``profile_of``), the settings' method (LoRA on a 4-bit base counts as qlora), strategy ("none")
    and whether the step is compiled."""
    kw = matrix.settings(cell)
    profile = matrix.profile_of(cell) if hasattr(matrix, "profile_of") else matrix.profile
    method = kw["method"]
    if method == "lora" and kw.get("load_in_4bit"):
        method = "qlora"
    return profile, method, kw.get("strategy", "none"), bool(kw.get("compile", False))


def key_of(e: dict) -> tuple:
    """The cell key of a file entry (``compile`` absent: eager)."""
    return e["profile"], e["method"], e["strategy"], bool(e.get("compile", False))


def key_text(key: tuple) -> str:
    return "/".join(key[:3]) + ("/compiled" if key[3] else "")


def world_size(matrix, cell) -> int:
    kw = matrix.settings(cell)
    return kw.get("world_size", 1) if kw.get("strategy", "none") != "none" else 1


def expected_cells(matrices) -> dict:
    """{(profile, method, strategy, compile): (cells, matrices)} over the cells of ``matrices`` (nothing measured)."""
    out: dict = {}
    for m in matrices:
        for cell in m.cells():
            key = cell_key(m, cell)
            n, names = out.get(key, (0, ()))
            out[key] = (n + 1, names if m.name in names else names + (m.name,))
    return out


def commit() -> str | None:
    """The checkout's short commit, ``+changes`` when the files the figures depend on differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "engine", "families", "formulas",
                                "benchmarks/validation_matrices.py"], cwd=REPO, capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+changes" if dirty else "")


def entries_from_rows(rows: dict, generated: str, at: str | None) -> list[dict]:
    """The bands of measured rows: ``rows`` maps a matrix to its [(cell, row of Matrix.run_cell)]."""
    pooled: dict = {}
    for m, got in rows.items():
        for cell, r in got:
            p = pooled.setdefault(cell_key(m, cell), {"errors": [], "world_sizes": set(), "matrices": []})
            p["errors"].append(abs(r["error"]))
            p["world_sizes"].add(world_size(m, cell))
            if m.name not in p["matrices"]:
                p["matrices"].append(m.name)
    out = []
    for (profile, method, strategy, compiled), p in pooled.items():
        e = p["errors"]
        out.append({"profile": profile, "method": method, "strategy": strategy,
                    **({"compile": True} if compiled else {}), "cells": len(e),
                    "median_abs_error": round(statistics.median(e), 6), "max_abs_error": round(max(e), 6),
                    "world_sizes": sorted(p["world_sizes"]), "matrices": p["matrices"], "generated": generated,
                    "commit": at})
    return out


def merge(kept: list[dict], new: list[dict], measured: set[str]) -> list[dict]:
    """``new`` (from the matrices named in ``measured``) over the entries ``kept`` from the file: an old
    entry of a measured matrix goes; one pooled with a matrix not measured again, or with the key of a
    new one, stops the merge (the matrices of one key are measured together)."""
    out = []
    new_keys = {key_of(e) for e in new}
    for e in kept:
        mine = set(e["matrices"]) & measured
        key = key_of(e)
        if (mine and set(e["matrices"]) - measured) or (not mine and key in new_keys):
            raise SystemExit(f"the {key_text(key)} band pools matrices {', '.join(e['matrices'])} with those "
                             f"measured now: measure them together (--matrix for each)")
        if not mine:
            out.append(e)
    return out + new


def _order(e: dict, profiles: list[str]) -> tuple:
    from validation_matrices import METHODS

    return (profiles.index(e["profile"]) if e["profile"] in profiles else len(profiles), e["profile"],
            METHODS.index(e["method"]) if e["method"] in METHODS else len(METHODS), e["strategy"] != "none",
            e["strategy"], bool(e.get("compile", False)))


def render(entries: list[dict]) -> str:
    """The file's text: the header, the bands (profile, method, then one GPU before the strategies) and
    what is not measured."""
    profiles = ["hf", "torchtune", "litgpt"]
    lines = [HEADER.rstrip("\n"), "schema_version: 1", "bands:" if entries else "bands: []"]
    for e in sorted(entries, key=lambda e: _order(e, profiles)):
        lines += [
            f"  - profile: {e['profile']}",
            f"    method: {e['method']}",
            f"    strategy: {e['strategy']}",
            *(["    compile: true"] if e.get("compile") else []),
            f"    cells: {e['cells']}",
            f"    median_abs_error: {e['median_abs_error']:.6f}",
            f"    max_abs_error: {e['max_abs_error']:.6f}",
            f"    world_sizes: [{', '.join(str(w) for w in e['world_sizes'])}]",
            f"    matrices: [{', '.join(e['matrices'])}]",
            f"    generated: '{e['generated']}'",
            f"    commit: {repr(e['commit']) if e['commit'] else 'null'}",
        ]
    lines.append("unmeasured:")
    for kind, name, reason in UNMEASURED:
        lines += [f"  - {kind}: {name}", f"    reason: {reason}"]
    return "\n".join(lines) + "\n"


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def render_table(entries: list[dict]) -> str:
    """The bands as docs/error-bands.md shows them, below its marker."""
    profiles = ["hf", "torchtune", "litgpt"]
    out = [DOCS_MARKER, "", "| profile | method | strategy | GPUs | cells | median abs error | largest abs error "
           "| matrices | measured |", "|---|---|---|---|---:|---:|---:|---|---|"]
    for e in sorted(entries, key=lambda e: _order(e, profiles)):
        strategy = e["strategy"] + (", compiled" if e.get("compile") else "")
        out.append(f"| {e['profile']} | {e['method']} | {strategy} | {', '.join(map(str, e['world_sizes']))} "
                   f"| {e['cells']} | {_pct(e['median_abs_error'])} | {_pct(e['max_abs_error'])} "
                   f"| {', '.join(e['matrices'])} | {e['generated']}" + (f" at {e['commit']}" if e["commit"] else "")
                   + " |")
    out += ["", "Not measured:", ""]
    out += [f"- {kind} `{name}`: {reason}" for kind, name, reason in UNMEASURED]
    return "\n".join(out) + "\n"


def docs_page(entries: list[dict], page: Path = DOCS) -> str:
    """docs/error-bands.md with its table of ``entries`` (the text above the marker kept)."""
    return page.read_text(encoding="utf-8").split(DOCS_MARKER)[0] + render_table(entries)


def read_entries(path: Path = OUT) -> list[dict]:
    """The bands of the file on disk (none when there is no file)."""
    import yaml

    if not path.is_file():
        return []
    return list((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("bands") or [])


def write(rows: dict, path: Path = OUT, at: str | None = None, measuring: set[str] | None = None) -> Path:
    """Write the file from measured ``rows`` ({matrix: [(cell, row)]}), keeping the entries of the
    matrices not among them, nor among ``measuring`` (those still to come in this run); ``at``: the
    commit measured, else this checkout's."""
    generated = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    new = entries_from_rows(rows, generated, at or commit())
    entries = merge(read_entries(path), new, {m.name for m in rows} | (measuring or set()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(entries), encoding="utf-8")
    if path == OUT:
        DOCS.write_text(docs_page(entries), encoding="utf-8")
    return path


def check(path: Path = OUT) -> list[str]:
    """What differs between the file's cell keys and counts and the matrices' cells, and between
    docs/error-bands.md and the file (empty: current)."""
    expected = expected_cells(all_matrices().values())
    entries = read_entries(path)
    got = {key_of(e): (e["cells"], tuple(e["matrices"])) for e in entries}
    problems = []
    if path == OUT and DOCS.read_text(encoding="utf-8") != docs_page(entries):
        problems.append(f"{DOCS.relative_to(REPO)}: its table differs from {path.name}")
    for key in sorted(set(expected) | set(got)):
        if expected.get(key) != got.get(key):
            problems.append(f"{key_text(key)}: the matrices have {expected.get(key, (0, ()))}, "
                            f"{path.name} has {got.get(key, (0, ()))} (cells, matrices)")
    return problems


def measure(names, path: Path = OUT, at: str | None = None) -> None:
    """Measure the matrices ``names`` and write the bands after each (those measured so far)."""
    matrices = all_matrices()
    planned = set(names)
    keys = [{"profile": k[0], "method": k[1], "strategy": k[2], **({"compile": True} if k[3] else {})}
            for k in expected_cells([matrices[n] for n in names])]
    merge(read_entries(path), keys, planned)  # a band pooled with a matrix left out stops here, before measuring
    rows: dict = {}
    for name in names:
        m = matrices[name]
        got = rows[m] = []
        for cell in m.cells():
            t = time.perf_counter()
            r = m.run_cell(cell)
            got.append((cell, r))
            print(f"{r['cell']:<45} {100 * r['error']:+.3f} %  {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
        write(rows, path, at, planned)
        print(f"wrote the bands of {', '.join(x.name for x in rows)} to {path}", file=sys.stderr, flush=True)


def main() -> int:
    matrices = all_matrices()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", action="append", choices=sorted(matrices),
                    help="measure only this matrix (repeatable); the other matrices' entries are kept")
    ap.add_argument("--check", action="store_true", help="compare the file's cell keys and counts with the matrices")
    ap.add_argument("--rewrite", action="store_true",
                    help="no measuring: write the file and the page again from the file's own entries")
    ap.add_argument("--commit", help="the commit the measured code is at, where the vramwise imported is not this "
                                     "checkout (an export of a commit, measured beside uncommitted work)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.check:
        problems = check(args.out)
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    if args.rewrite:
        path = write({}, args.out)
        print(f"wrote {path}", file=sys.stderr)
        return 0
    warnings.filterwarnings("ignore")
    measure(args.matrix or list(matrices), args.out, args.commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
