"""The long fuzzing campaign of issue 10: N cases per target, counted, with the findings' minimal inputs.

    python benchmarks/fuzz.py                          # 100,000 cases of every target
    python benchmarks/fuzz.py --cases 2000 --target cli
    python benchmarks/fuzz.py --target configs --resume   # continue where the last run of the target stopped

How cases are made (a choice, documented): not hypothesis. Each target's generator in
``benchmarks/fuzzing/generators.py`` draws from ``random.Random(f"{seed}:{target}:{index}")``, so case ``index``
is the same on every run and machine, a run can stop anywhere and resume at the next index, and a
case costs no hypothesis bookkeeping (``strategy.example()`` is neither reproducible nor meant for
loops, and ``@given`` with a huge ``max_examples`` stops at the first failure and cannot be resumed).
The hypothesis suite (``tests/unit/project/test_fuzz.py``) calls the same generators with hypothesis' recorded
random, so both explore the same space with the same mutation functions.

Each case runs in a forked sandbox worker (``benchmarks/fuzzing/sandbox.py``: address-space limit, wall-clock
kill with a stack dump, per-case CPU time and resident-memory high-water mark) and is judged by
``benchmarks/fuzzing/oracle.py``. Outcomes are counted per target: ``ok``, documented errors by class, findings
by kind. The first cases (three by default) of each finding kind are minimised (``benchmarks/fuzzing/minimize.py``: drop keys,
runs, argv tokens, halve sizes while the same finding remains) and saved under
``tests/fuzz_corpus/<target>/`` (``tests/unit/project/test_fuzz_corpus.py`` replays them). The counts, the slowest
case and the peak memory go to ``docs/robustness.md``, which also keeps each target's state (the next
index) in an HTML comment, so ``--resume`` and one-target runs update only their own section.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import random
import re
import sys
import time
from pathlib import Path

# the harness, benchmarks/fuzzing/, beside this script (the script's folder is on sys.path)
from fuzzing import GENERATORS, TARGETS, Sandbox
from fuzzing import corpus as C
from fuzzing.minimize import Minimiser
from fuzzing.oracle import MEMORY_LIMIT_MB, TIME_LIMIT_S
from fuzzing.targets import warm_up

REPO = Path(__file__).resolve().parents[1]

DOC = REPO / "docs" / "robustness.md"
_STATE = re.compile(r"<!-- state:(\w+) (.*?) -->")


def read_states(doc: Path) -> dict:
    if not doc.is_file():
        return {}
    return {m.group(1): json.loads(m.group(2)) for m in _STATE.finditer(doc.read_text(encoding="utf-8"))}


def corpus_labels(target: str) -> dict:
    out = {}
    for p in C.files():
        if p.parent.name == target:
            try:
                out.setdefault(C.load(p)[2].get("label"), []).append(str(p.relative_to(REPO)))
            except Exception:  # noqa: BLE001 - a hand-edited file
                continue
    return out


def _fmt_key(key: str) -> str:
    if key == "ok":
        return "ok (sane estimate, or exit 0)"
    status, _, label = key.partition(":")
    return f"documented error: {label}" if status == "error" else f"**finding: {label}**"


def render(states: dict) -> str:
    lines = [
        "# Robustness: fuzzing, and the server under load",
        "",
        "Written by `benchmarks/fuzz.py` (issue 10); the CI-sized suite is `tests/unit/project/test_fuzz.py`, the found",
        "inputs are replayed by `tests/unit/project/test_fuzz_corpus.py`. Cases come from the generators in",
        "`benchmarks/fuzzing/generators.py` (case *i* of a target is `random.Random(f\"{seed}:{target}:{i}\")`), run in",
        "a forked sandbox worker and are judged by `benchmarks/fuzzing/oracle.py`:",
        "",
        "- **ok**: a sane estimate (every component, phase and figure an int >= 0, total an int > 0,",
        "  params an int >= 0, `min_per_gpu(1..8)` an int >= 0, `to_dict()` strict JSON), or for the CLI",
        "  exit 0 (with `--json`: strict JSON on stdout);",
        "- **documented error**: an exception of the `vramwise.VramwiseError` tree, or for the CLI exit 2;",
        f"- **finding**: anything else, an insane value, over {TIME_LIMIT_S:g} s of CPU (`slow`), over",
        f"  {MEMORY_LIMIT_MB} MB of extra resident memory or a MemoryError (`memory`), still running at the",
        "  wall-clock limit (`timeout`, with the innermost engine function of the stack), or a dead worker (`crash`).",
        "",
        "Findings are labelled `kind@file:function` (the deepest engine frame); each new label's first case",
        "is minimised and saved under `tests/fuzz_corpus/<target>/`.",
        "",
        "How `vramwise serve` holds up against silent, stalled and concurrent clients is at the end: "
        "[the server under load](#the-server-under-load).",
        "",
    ]
    for target in TARGETS:
        st = states.get(target)
        if not st:
            continue
        total = sum(st["counts"].values())
        lines += [f"## {target}", ""]
        lines.append(f"Last run {st['date']}: `{st['command']}`; cases {st['first']:,}-{st['done'] - 1:,} of seed "
                     f"{st['seed']} in this section ({total:,} cases), {st['elapsed_s']:.0f} s.")
        lines += ["", "| outcome | cases | share |", "|---|---:|---:|"]
        for key, n in sorted(st["counts"].items(), key=lambda kv: (kv[0] != "ok", kv[0].startswith("finding"), -kv[1])):
            lines.append(f"| {_fmt_key(key)} | {n:,} | {100 * n / total:.2f} % |")
        s, m = st.get("slowest") or {}, st.get("peak") or {}
        lines.append("")
        if s:
            lines.append(f"Slowest case: #{s['index']}, {s['cpu_s']:.3f} s CPU ({s['wall_s']:.3f} s wall), outcome `{s['key']}`.")
        if m:
            lines.append(f"Peak memory: +{m['mem_mb']:.1f} MB resident above the worker's size before the case (#{m['index']}, `{m['key']}`).")
        if st.get("findings"):
            lines += ["", "| finding | cases | first case | minimal input | detail |", "|---|---:|---:|---|---|"]
            for label, f in sorted(st["findings"].items(), key=lambda kv: -kv[1]["count"]):
                detail = f["detail"][:160].replace("|", "\\|").replace("\n", " ")
                saved = ", ".join(f.get("corpus") or []) or "-"
                lines.append(f"| `{label}` | {f['count']:,} | #{f['first']} | {saved} | {detail} |")
        lines += ["", f"<!-- state:{target} {json.dumps(st, sort_keys=True)} -->", ""]
    return "\n".join(lines)


#: the line after which the document is written by hand (the status notes, the server under load): kept as it is
KEEP_MARK = "<!-- written by hand from here on: benchmarks/fuzz.py keeps what follows -->"


def write(doc: Path, states: dict) -> None:
    doc.parent.mkdir(parents=True, exist_ok=True)
    text = doc.read_text(encoding="utf-8") if doc.exists() else ""
    kept = text[text.index(KEEP_MARK):] if KEEP_MARK in text else KEEP_MARK + "\n"
    tmp = doc.with_suffix(".md.tmp")
    tmp.write_text(render(states).rstrip("\n") + "\n\n" + kept, encoding="utf-8")
    tmp.replace(doc)


def campaign(target: str, args, states: dict, sandbox: Sandbox, command: str) -> None:
    prev = states.get(target) if args.resume else None
    if prev and prev.get("seed") != args.seed:
        prev = None
    first = prev["first"] if prev else args.start
    start = prev["done"] if prev else args.start
    end = first + args.cases
    counts = collections.Counter(prev["counts"] if prev else {})
    findings = dict(prev.get("findings", {})) if prev else {}
    slowest, peak = (prev.get("slowest"), prev.get("peak")) if prev else (None, None)
    elapsed0 = prev["elapsed_s"] if prev else 0.0
    known = corpus_labels(target)
    t0 = last_write = time.monotonic()

    def state(done: int) -> dict:
        return {"seed": args.seed, "first": first, "done": done, "counts": dict(counts), "findings": findings,
                "slowest": slowest, "peak": peak, "date": datetime.date.today().isoformat(), "command": command,
                "elapsed_s": elapsed0 + time.monotonic() - t0}

    gen = GENERATORS[target]
    for i in range(start, end):
        case = gen(random.Random(f"{args.seed}:{target}:{i}"))
        o = sandbox.run(target, case)
        counts[o.key] += 1
        if slowest is None or o.cpu_s > slowest["cpu_s"]:
            slowest = {"index": i, "cpu_s": o.cpu_s, "wall_s": o.wall_s, "key": o.key}
        if peak is None or o.mem_mb > peak["mem_mb"]:
            peak = {"index": i, "mem_mb": o.mem_mb, "key": o.key}
        if o.status == "finding":
            f = findings.setdefault(o.label, {"count": 0, "first": i, "detail": o.detail[:300],
                                              "corpus": list(known.get(o.label, []))})
            f["count"] += 1
            f["minimised"] = f.get("minimised", 0)
            if len(f["corpus"]) < args.per_label and f["minimised"] < args.per_label and not args.no_minimise:
                f["minimised"] += 1
                small = Minimiser(sandbox, target, o.label, seconds=args.minimise_s).run(case)
                check = sandbox.run(target, small)
                if check.status == "finding" and check.label == o.label:
                    case, o = small, check
                try:
                    path = str(C.save(target, case, o).relative_to(REPO))
                except ValueError as e:  # too large to keep even after minimising
                    path = f"(not kept: {e})"
                if path not in f["corpus"]:
                    f["corpus"].append(path)
                known[o.label] = f["corpus"]
                f["detail"] = o.detail[:300]
                print(f"  [{target} #{i}] {o.label}: {o.detail[:120]} -> {path}", flush=True)
        if time.monotonic() - last_write > 30 or i == end - 1:
            states[target] = state(i + 1)
            write(args.doc, states)
            last_write = time.monotonic()
            if args.progress:
                print(f"{target}: {i + 1 - first:,}/{args.cases:,} cases, {dict(counts.most_common(4))}", flush=True)
    states[target] = state(end)
    write(args.doc, states)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=100_000, help="cases per target (default: 100,000)")
    p.add_argument("--target", action="append", choices=TARGETS, help="run only this target (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="campaign seed (default: 0)")
    p.add_argument("--start", type=int, default=0, help="first case index (default: 0)")
    p.add_argument("--resume", action="store_true", help="continue each target at the next index its section records")
    p.add_argument("--wall-limit", type=float, default=10.0, help="seconds before a case is killed (default: 10)")
    p.add_argument("--minimise-s", type=float, default=60.0, help="seconds spent minimising each new finding")
    p.add_argument("--per-label", type=int, default=3, help="corpus files kept per finding label (default: 3)")
    p.add_argument("--no-minimise", action="store_true", help="save nothing to the corpus")
    p.add_argument("--doc", type=Path, default=DOC, help="where the counts go (default: docs/robustness.md)")
    p.add_argument("--progress", action="store_true", help="print the counts every 30 s")
    args = p.parse_args(argv)
    command = "python benchmarks/fuzz.py " + " ".join(argv if argv is not None else sys.argv[1:])
    warm_up()
    states = read_states(args.doc)
    with Sandbox(wall_limit=args.wall_limit) as sandbox:
        for target in args.target or TARGETS:
            t = time.monotonic()
            campaign(target, args, states, sandbox, command.strip())
            st = states[target]
            bad = sum(v for k, v in st["counts"].items() if k.startswith("finding"))
            print(f"{target}: {sum(st['counts'].values()):,} cases, {bad:,} findings in {len(st['findings'])} kinds, "
                  f"{time.monotonic() - t:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
