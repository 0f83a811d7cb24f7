"""Time one CLI estimate: `vramwise estimate CONFIG` in fresh processes, with a cold, a warm and no cache.

    python benchmarks/bench_cli.py [-n 11] [--config examples/llama-3.1-8b.json] [--site FOLDER ...]

Each run is a new process (bytecode cached, as after `pip install`), its standard output read and thrown away.
Cold: an empty cache folder per run (`VRAMWISE_CACHE_DIR`), so the run composes and checks everything and
writes the cache; warm: one folder filled by a first run, then read by every run; off: `VRAMWISE_CACHE_DIR=off`.
Reported: the median and the lowest wall time, and the median CPU time (user + system) of the process, which
moves less than the wall time on a loaded machine; and the same of a bare `python -c pass`, run between them, for
the machine's scale at the time. Every output is compared with the first one of its install: a run whose
output differs stops the benchmark (two installs may print different figures). `--site FOLDER` runs an install of vramwise found in FOLDER (put first on
PYTHONPATH; e.g. one made by `pip install --no-deps --target FOLDER .`) instead of the one of this Python; several
`--site`s are timed alternately in one run (the first one is the baseline), and the modes of each site too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _command(config: str) -> list[str]:
    script = Path(sys.executable).with_name("vramwise")  # the console script, as a user runs it
    if script.exists():
        return [str(script), "estimate", config]
    return [sys.executable, "-m", "vramwise", "estimate", config]


def _run(cmd: list[str], env: dict) -> tuple[float, float, bytes]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} exited with {proc.returncode}:\n{out.decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=11, help="runs of each mode (default 11)")
    ap.add_argument("--config", default="examples/llama-3.1-8b.json")
    ap.add_argument("--site", action="append", default=[], help="a folder holding the vramwise to run (repeatable)")
    ap.add_argument("--modes", default="cold,warm,off", help="comma-separated: cold, warm, off")
    args = ap.parse_args(argv)
    sites = args.site or [None]
    modes = [m for m in args.modes.split(",") if m]
    cmd = _command(args.config)
    tmp = Path(tempfile.mkdtemp(prefix="vramwise-bench-cli-"))
    reference: dict = {}  # each site's first output (two versions may print different figures)
    times: dict[tuple, list[tuple[float, float]]] = {}
    try:
        envs = {}
        for s, site in enumerate(sites):
            env = dict(os.environ)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            if site:
                env["PYTHONPATH"] = os.pathsep.join([str(Path(site).resolve())] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
            env["VRAMWISE_CACHE_DIR"] = str(tmp / f"warm-{s}")
            _run(cmd, env)  # writes the bytecode (if missing) and fills the warm cache
            envs[s] = env
        for i in range(args.n):
            for s in envs:
                for mode in modes:
                    env = dict(envs[s])
                    if mode == "cold":
                        env["VRAMWISE_CACHE_DIR"] = str(tmp / f"cold-{s}-{i}")
                    elif mode == "off":
                        env["VRAMWISE_CACHE_DIR"] = "off"
                    wall, cpu, out = _run(cmd, env)
                    if reference.setdefault(s, out) != out:
                        raise SystemExit(f"the output of {sites[s] or 'this install'} ({mode}) differs from its first run's")
                    times.setdefault((s, mode), []).append((wall, cpu))
            # the interpreter's own start (with site, as every run above has), for scale
            wall, cpu, _ = _run([sys.executable, "-c", "pass"], envs[0])
            times.setdefault((None, "python -c pass"), []).append((wall, cpu))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{' '.join(Path(c).name if k == 0 else c for k, c in enumerate(cmd))}: {args.n} runs a mode, "
          f"load average {load:.1f} at the end")
    for (s, mode), runs in times.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        name = "" if s is None else sites[s] or "this install"
        print(f"{name:<30} {mode:<14} wall median {statistics.median(walls) * 1e3:7.1f} ms, lowest "
              f"{min(walls) * 1e3:7.1f} ms; CPU median {statistics.median(cpus) * 1e3:7.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
