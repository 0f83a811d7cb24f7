"""A forked worker that runs cases with an address-space limit, per-case CPU/memory accounting and a
wall-clock kill, so that no case can hang or bloat the process that drives the fuzzing.

Per case the worker resets its resident-memory high-water mark (``/proc/self/clear_refs``, ``5``) and
reports ``VmHWM`` minus the resident size before the case, and the CPU time the case took. A case
over ``time_limit`` CPU seconds (:data:`~.oracle.TIME_LIMIT_S` in the campaign,
:data:`~.oracle.SUITE_TIME_LIMIT_S` in the test suite) is a ``slow`` finding, one over
:data:`~.oracle.MEMORY_LIMIT_MB` a ``memory`` finding; one still running after ``wall_limit`` seconds
is killed (``timeout``), and a worker that dies (a C-level crash, a signal) is a ``crash``. The
worker's address space is capped at its size when forked plus ``as_limit_mb``, so a runaway
allocation ends as a MemoryError (a ``memory`` finding) instead of taking the machine.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import resource
import shutil
import signal
import tempfile
import time

from .oracle import MEMORY_LIMIT_MB, TIME_LIMIT_S, Outcome, classify

_CTX = multiprocessing.get_context("fork")


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in kB (0 where it cannot be read)."""
    try:
        with open("/proc/self/status") as fh:
            m = re.search(rf"^{field}:\s+(\d+)", fh.read(), re.M)
        return int(m.group(1)) if m else 0
    except OSError:
        return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _worker(conn, scratch: str, as_limit_mb: int, time_limit: float = TIME_LIMIT_S) -> None:
    from .targets import Runner

    os.environ["HF_HUB_OFFLINE"] = "1"
    vsize = _status("VmSize") * 1024
    if vsize and as_limit_mb:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (vsize + as_limit_mb * 2**20, hard))
    import faulthandler
    import signal

    # on a timeout the parent asks for the stack (SIGUSR1) before it kills the worker
    trace = open(os.path.join(scratch, f"stack-{os.getpid()}.txt"), "w")  # noqa: SIM115 - lives as long as the worker
    faulthandler.register(signal.SIGUSR1, file=trace, all_threads=False, chain=False)
    runner = Runner(scratch)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        target, case = msg
        can_reset = _reset_peak()
        rss0 = _status("VmRSS")
        c0, t0 = time.process_time(), time.perf_counter()
        try:
            outcome = runner.run(target, case)
        except BaseException as exc:  # noqa: BLE001 - MemoryError, RecursionError in the harness itself
            outcome = classify(exc)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        mem = (_status("VmHWM") - rss0) / 1024 if can_reset else 0.0
        outcome.cpu_s, outcome.wall_s, outcome.mem_mb = cpu, wall, mem
        if outcome.status != "finding":
            if cpu > time_limit:
                outcome = Outcome("finding", "slow", f"{cpu:.2f} s of CPU (limit {time_limit:g} s); "
                                  f"without the limit: {outcome.key}", cpu, wall, mem)
            elif mem > MEMORY_LIMIT_MB:
                outcome = Outcome("finding", "memory", f"{mem:.0f} MB above the resident size before the case "
                                  f"(limit {MEMORY_LIMIT_MB} MB); without the limit: {outcome.key}", cpu, wall, mem)
        try:
            conn.send(outcome)
        except Exception:  # noqa: BLE001 - an unpicklable detail: send the essentials
            conn.send(Outcome(outcome.status, outcome.label, outcome.detail[:300], cpu, wall, mem))


class Sandbox:
    """Runs ``(target, case)`` in a forked worker; see the module docstring."""

    def __init__(self, *, wall_limit: float = 10.0, as_limit_mb: int = 1536, recycle: int = 2000,
                 time_limit: float = TIME_LIMIT_S):
        self.wall_limit = wall_limit
        self.time_limit = time_limit
        self.as_limit_mb = as_limit_mb
        self.recycle = recycle
        self.scratch = tempfile.mkdtemp(prefix="vramwise-fuzz-")
        self._proc = None
        self._conn = None
        self._served = 0

    def _start(self) -> None:
        parent, child = _CTX.Pipe()
        self._proc = _CTX.Process(target=_worker, args=(child, self.scratch, self.as_limit_mb, self.time_limit),
                                  daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        self._served = 0

    def _stop(self, kill: bool = False) -> None:
        if self._proc is None:
            return
        if not kill:
            try:
                self._conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            self._proc.join(2)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()
        self._proc = self._conn = None

    def run(self, target: str, case: dict) -> Outcome:
        if self._proc is None or not self._proc.is_alive() or self._served >= self.recycle:
            self._stop()
            self._start()
        self._served += 1
        t0 = time.perf_counter()
        try:
            self._conn.send((target, case))
        except (OSError, BrokenPipeError):
            self._stop(kill=True)
            return Outcome("finding", "crash", "the worker died before the case was sent")
        if not self._conn.poll(self.wall_limit):
            where, stack = self._stack()
            self._stop(kill=True)
            return Outcome("finding", f"timeout@{where}", f"still running after {self.wall_limit:g} s (killed); "
                           f"stack: {stack}", wall_s=time.perf_counter() - t0)
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            code = self._proc.exitcode if self._proc is not None else None
            self._proc.join(2) if self._proc is not None else None
            code = self._proc.exitcode if self._proc is not None else code
            self._stop(kill=True)
            return Outcome("finding", "crash", f"the worker died (exit code {code})", wall_s=time.perf_counter() - t0)

    def _stack(self) -> tuple[str, str]:
        """Where the worker is now: the deepest engine frame of a faulthandler dump, and the dump's frames."""
        pid = self._proc.pid
        path = os.path.join(self.scratch, f"stack-{pid}.txt")
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            return "?", ""
        lines = []
        for _ in range(20):
            time.sleep(0.05)
            try:
                with open(path) as fh:
                    lines = [ln.strip() for ln in fh if ln.strip().startswith("File ")]
            except OSError:
                lines = []
            if lines:
                break
        frames = []
        for ln in lines:  # most recent call first: File "path", line N in func
            m = re.match(r'File "(.+)", line \d+ in (.+)', ln)
            if m:
                frames.append((m.group(1), m.group(2)))
        engine = [f for f in frames if f"{os.sep}engine{os.sep}" in f[0]]
        top = (engine or frames or [("?", "?")])[0]
        return f"{os.path.basename(top[0])}:{top[1]}", " <- ".join(f"{os.path.basename(a)}:{b}" for a, b in frames[:8])

    def close(self) -> None:
        self._stop()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
