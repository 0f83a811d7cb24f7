"""Two installs of vramwise timed in one run, alternating, so that the machine's load falls on both alike.

    python benchmarks/side_by_side.py OLD_SITE [NEW_SITE] [--rounds 3] [--quick] [--configs]

OLD_SITE (and NEW_SITE, by default the vramwise this Python imports) is a folder that holds a
``vramwise`` package, e.g. made by ``pip install --no-deps --target /tmp/old-site <checkout>``. Each
round runs ``bench_estimate.py`` of this checkout once under each install (old first on odd rounds,
new first on even ones) and prints both outputs side by side, line by line; a rewrite that keeps the
figures must show no slowdown beyond the spread between rounds. ``--configs`` times every config of
``../shared/configs`` against the reference estimator instead (``bench_estimate.py --configs``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run(site: str | None, quick: bool, configs: bool = False) -> list[str]:
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, str(HERE / "bench_estimate.py")]
    cmd += (["--quick"] if quick else []) + (["--configs"] if configs else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=HERE.parent)
    return out.stdout.splitlines()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old_site")
    ap.add_argument("new_site", nargs="?")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="fewer calls per figure (bench_estimate.py --quick)")
    ap.add_argument("--configs", action="store_true",
                    help="every config of ../shared/configs against the reference (bench_estimate.py --configs)")
    args = ap.parse_args()
    for r in range(args.rounds):
        order = [("old", args.old_site), ("new", args.new_site)]
        if r % 2:
            order.reverse()
        outs = {name: _run(site, args.quick, args.configs) for name, site in order}
        print(f"-- round {r + 1} ({' then '.join(n for n, _ in order)})")
        width = max(len(line) for line in outs["old"]) + 2
        for a, b in zip(outs["old"], outs["new"]):
            print(f"old {a:<{width}}| new {b}")


if __name__ == "__main__":
    main()
