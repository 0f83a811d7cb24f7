#!/usr/bin/env python3
"""`vramwise serve` under hostile and heavy load, on loopback: the load test's harness and its benchmark.

    python benchmarks/serve_load.py [--silent 200] [--stalled 200] [--clients 64] [--requests 2048]

The server runs in a process of its own (its memory is read from /proc), with the limits given.

1. **Starvation**: ``--silent`` sockets that connect and send nothing, and ``--stalled`` that send part
   of a request (half a header block, or the headers and part of a body) and stop, all held open;
   meanwhile a normal client sends requests, each timed from connect to parsed answer. Then, after the
   request deadline, how many of the held sockets the server has closed (and how many of the stalled
   ones it answered ``408``).
2. **Throughput**: ``--clients`` threads, each a kept-alive client, send ``--requests`` estimates in
   all (batch size and sequence length varying); every answer's total is compared with the library's
   own figure for the same settings, computed in this process. Throughput, p50 and p99 latency, and
   the server's resident memory before and after.
3. **Queue**: more requests at once than workers and queue hold (slow fits): the ones beyond are
   answered ``503`` with ``Retry-After`` at once.

Exit status 0 when every check holds (the test tests/unit/surfaces/test_serve_load.py runs the same functions,
smaller).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

MODEL = "meta-llama/Llama-3.1-8B"
_CHILD = "--serve-child"


# -- the server in a process of its own -----------------------------------------------------------

def _serve_child(limits_json: str) -> None:
    from vramwise.surfaces.serve import make_server
    from vramwise.surfaces.serve_guard import Limits

    server, sock, url = make_server("127.0.0.1", 0, limits=Limits(**json.loads(limits_json)))
    sys.stdout.write(url + "\n")
    sys.stdout.flush()
    server.run(sockets=[sock])


@contextlib.contextmanager
def server_process(**limits):
    """(URL, pid) of a `vramwise serve` on a free loopback port, in a child process, stopped on exit."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), _CHILD, json.dumps(limits)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = p.stdout.readline().strip()
        if not line.startswith("http://"):
            raise RuntimeError(f"the server did not start: {line!r} {p.stderr.read()[:2000] if p.poll() is not None else ''}")
        yield line, p.pid
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            p.kill()
            p.wait(5)


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _address(url: str) -> tuple[str, int]:
    host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    return host, int(port)


# -- one request on a fresh connection, by hand (no client library between the test and the server) ---

def request(url: str, body: dict, path: str = "/api/estimate", timeout: float = 10.0) -> tuple[int, dict, dict]:
    """(status, headers, JSON answer) of one POST on a new connection."""
    data = json.dumps(body).encode()
    host, port = _address(url)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        raw = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            raw += chunk
    head, _, payload = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:] if ":" in x)}
    try:
        return status, headers, json.loads(payload) if payload else {}
    except ValueError:  # not JSON (a server that is not this one, or a proxy's page)
        return status, headers, {"text": payload[:200].decode("latin-1")}


# -- 1. starvation ---------------------------------------------------------------------------------

_STALLS = (
    b"POST /api/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty",  # half a header block
    b"POST /api/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 100\r\n\r\n{\"model\":",  # the headers and part of the body
)


def starvation(url: str, *, silent: int, stalled: int, probes: int, expected: int, wait_closed: float) -> dict:
    """Hold ``silent`` + ``stalled`` sockets open while a normal client sends ``probes`` requests; then wait
    ``wait_closed`` seconds and count the held sockets the server closed."""
    host, port = _address(url)
    held: list[tuple[socket.socket, bool]] = []
    try:
        for i in range(silent + stalled):
            s = socket.create_connection((host, port), timeout=5)
            if i >= silent:
                s.sendall(_STALLS[i % len(_STALLS)])
            held.append((s, i >= silent))
        latencies, statuses, totals = [], [], []
        for i in range(probes):
            t = time.perf_counter()
            status, _, data = request(url, {"model": MODEL, "batch_size": 2})
            latencies.append(time.perf_counter() - t)
            statuses.append(status)
            totals.append(data.get("total"))
            time.sleep(0.2)
        time.sleep(wait_closed)
        closed = answered_408 = 0
        for s, was_stalled in held:
            s.settimeout(0.5)
            try:
                got = s.recv(4096)
            except (socket.timeout, BlockingIOError):
                continue  # still open
            except ConnectionResetError:
                got = b""
            closed += 1
            if was_stalled and got.startswith(b"HTTP/1.1 408"):
                answered_408 += 1
        return {"held": len(held), "probe_latencies_s": latencies, "probe_statuses": statuses,
                "probe_totals_ok": all(x == expected for x in totals), "closed_after_wait": closed,
                "stalled_answered_408": answered_408}
    finally:
        for s, _ in held:
            s.close()


def idle_keep_alive_closed(url: str, keep_alive: float) -> bool:
    """A kept-alive connection left idle after an answer is closed by the server within keep_alive + 1 s."""
    host, port = _address(url)
    data = json.dumps({"model": MODEL}).encode()
    with socket.create_connection((host, port), timeout=keep_alive + 2) as s:
        s.sendall(f"POST /api/estimate HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(65536)
        t = time.monotonic()
        try:
            while s.recv(65536):
                pass
        except socket.timeout:
            return False
        return time.monotonic() - t <= keep_alive + 1


# -- 2. throughput -----------------------------------------------------------------------------------

def _bodies(n: int) -> list[dict]:
    return [{"model": MODEL, "batch_size": 1 + i % 8, "seq_len": 512 * (1 + (i // 8) % 4)} for i in range(n)]


def expected_totals(bodies: list[dict]) -> dict[tuple, int]:
    """The library's own total for each distinct (batch_size, seq_len) of the bodies, in this process."""
    import vramwise

    keys = {(b["batch_size"], b["seq_len"]) for b in bodies}
    return {k: vramwise.estimate(MODEL, batch_size=k[0], seq_len=k[1]).total for k in keys}


def throughput(url: str, *, clients: int, requests: int) -> dict:
    """``clients`` kept-alive clients send ``requests`` estimates in all; every answer checked.

    A request that fails at the transport level without any answer (the server closed the kept-alive
    connection as its idle timeout ran out, while the client, starved of CPU, was only then sending on
    it) is sent once more on a new connection, as HTTP clients retry on a connection the server closed
    (RFC 9112 section 9.3.1); such retries are counted in ``retried``, and a request whose retry fails
    too is lost."""
    import httpx

    bodies = _bodies(requests)
    want = expected_totals(bodies)
    per_client = [bodies[i::clients] for i in range(clients)]
    latencies: list[float] = []
    problems: list[str] = []
    retried: list[str] = []
    lock = threading.Lock()
    opts = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]

    def client():
        return httpx.Client(base_url=url, timeout=30, transport=httpx.HTTPTransport(socket_options=opts))

    def run(mine: list[dict]) -> None:
        c = client()
        try:
            for body in mine:
                t = time.perf_counter()
                try:
                    try:
                        r = c.post("/api/estimate", json=body)
                    except httpx.TransportError as e:  # no answer at all: once more, on a new connection
                        if isinstance(e, httpx.TimeoutException):
                            raise
                        with lock:
                            retried.append(f"{type(e).__name__}: {e}")
                        c.close()
                        c = client()
                        r = c.post("/api/estimate", json=body)
                    ok = r.status_code == 200 and r.json()["total"] == want[(body["batch_size"], body["seq_len"])]
                    why = f"{r.status_code} {r.text[:120]}"
                except Exception as e:  # noqa: BLE001 - counted as a lost request
                    ok, why = False, f"{type(e).__name__}: {e}"
                dt = time.perf_counter() - t
                with lock:
                    latencies.append(dt)
                    if not ok:
                        problems.append(why)
        finally:
            c.close()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(run, per_client))
    wall = time.perf_counter() - t0
    lat = sorted(latencies)
    return {"requests": len(latencies), "wrong_or_lost": len(problems), "problems": problems[:5],
            "retried": len(retried), "retried_why": retried[:5],
            "wall_s": wall, "per_s": len(latencies) / wall, "p50_ms": 1000 * statistics.median(lat),
            "p99_ms": 1000 * lat[max(0, int(0.99 * len(lat)) - 1)]}


# -- 3. the queue ------------------------------------------------------------------------------------

def queue_overflow(url: str, *, at_once: int) -> dict:
    """``at_once`` slow requests (fits over many context lengths) sent together on new connections:
    statuses, and the slowest 503's latency (a 503 is immediate, never a hang)."""
    body = {"model": MODEL, "gpu": "H100", "seq_lens": [256 * (i + 1) for i in range(64)]}
    results: list[tuple[int, dict, float]] = []
    lock = threading.Lock()
    start = threading.Barrier(at_once)

    def one(_):
        start.wait()
        t = time.perf_counter()
        status, headers, _ = request(url, body, path="/api/fit", timeout=60)
        with lock:
            results.append((status, headers, time.perf_counter() - t))

    with ThreadPoolExecutor(at_once) as pool:
        list(pool.map(one, range(at_once)))
    refused = [(h, dt) for s, h, dt in results if s == 503]
    return {"sent": at_once, "ok": sum(1 for s, _, _ in results if s == 200), "refused_503": len(refused),
            "other": sorted({s for s, _, _ in results if s not in (200, 503)}),
            "refused_with_retry_after": all("retry-after" in h for h, _ in refused),
            "slowest_refusal_s": max((dt for _, dt in refused), default=0.0)}


# -- the benchmark -------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--silent", type=int, default=200, help="silent sockets held open (default: 200)")
    ap.add_argument("--stalled", type=int, default=200, help="stalled sockets held open (default: 200)")
    ap.add_argument("--clients", type=int, default=64, help="concurrent clients (default: 64)")
    ap.add_argument("--requests", type=int, default=2048, help="estimates sent in all (default: 2048)")
    args = ap.parse_args(argv)
    from vramwise.surfaces.serve import default_limits
    from dataclasses import asdict

    import vramwise

    limits = asdict(default_limits())
    expected = vramwise.estimate(MODEL, batch_size=2).total
    ok = True
    with server_process(**limits) as (url, pid):
        request(url, {"model": MODEL})  # warm: the model resolved, the formulas compiled
        rss0 = rss_bytes(pid)
        s = starvation(url, silent=args.silent, stalled=args.stalled, probes=10, expected=expected,
                       wait_closed=limits["request_deadline"] + 1)
        lat = s["probe_latencies_s"]
        print(f"starvation: {s['held']} sockets held ({args.silent} silent, {args.stalled} stalled); a normal client: "
              f"statuses {sorted(set(s['probe_statuses']))}, slowest {1000 * max(lat):.1f} ms, median "
              f"{1000 * statistics.median(lat):.1f} ms; after {limits['request_deadline'] + 1:g} s "
              f"{s['closed_after_wait']} of {s['held']} closed by the server, {s['stalled_answered_408']} stalled answered 408")
        ok &= max(lat) < 1 and set(s["probe_statuses"]) == {200} and s["probe_totals_ok"]
        ok &= s["closed_after_wait"] == s["held"]
        print(f"idle kept-alive connection closed after {limits['keep_alive']:g} s: "
              f"{idle_keep_alive_closed(url, limits['keep_alive'])}")
        t = throughput(url, clients=args.clients, requests=args.requests)
        rss1 = rss_bytes(pid)
        print(f"throughput: {t['requests']} estimates from {args.clients} clients in {t['wall_s']:.2f} s: "
              f"{t['per_s']:.0f}/s, p50 {t['p50_ms']:.1f} ms, p99 {t['p99_ms']:.1f} ms; wrong or lost "
              f"{t['wrong_or_lost']} {t['problems']}; sent again on a new connection {t['retried']} {t['retried_why']}")
        ok &= t["wrong_or_lost"] == 0
        q = queue_overflow(url, at_once=limits["workers"] + limits["queue"] + 60)
        rss2 = rss_bytes(pid)
        print(f"queue: {q['sent']} fits at once: {q['ok']} answered, {q['refused_503']} refused 503 (Retry-After on "
              f"each: {q['refused_with_retry_after']}), slowest refusal {1000 * q['slowest_refusal_s']:.0f} ms, "
              f"other statuses {q['other']}")
        print(f"server memory: {rss0 / 2**20:.1f} MiB before, {rss1 / 2**20:.1f} MiB after the throughput run, "
              f"{rss2 / 2**20:.1f} MiB after the queue run")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == _CHILD:
        _serve_child(sys.argv[2])
    else:
        sys.exit(main())
