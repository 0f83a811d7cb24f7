#!/usr/bin/env python3
"""`vramwise serve` on loopback: the page's first load in bytes, and the update round-trip.

    python benchmarks/bench_serve.py [--n 200]

First load: every response the page fetches before it shows the first answer (the HTML, app.js,
app.css, /api/settings, /api/catalog, /api/gpus, /api/families, then /api/estimate and /api/compare
for the default model), status line, headers and body, as sent (no compression). Target: at most
300 KB.

Round-trip: one keep-alive HTTP client with TCP_NODELAY (as browsers set it), POST /api/estimate with a new batch size each time (what the
page sends when a setting changes), wall time from send to parsed JSON; also the page's whole update
with a GPU chosen (estimate + fit with its frontier + compare, sent together as the page does).
Target: median at most 50 ms.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from serve_live import live_server  # this folder: the server the live tests start too

MODEL = "meta-llama/Llama-3.1-8B"
#: what browsers do: without TCP_NODELAY a client that writes the headers and the body separately waits for
#: the server's delayed ACK (about 40 ms on Linux) before sending the body
_NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=30, transport=httpx.HTTPTransport(socket_options=_NODELAY))


def _wire_bytes(r: httpx.Response) -> int:
    head = f"HTTP/1.1 {r.status_code} {r.reason_phrase}\r\n".encode()
    head += b"".join(k + b": " + v + b"\r\n" for k, v in r.headers.raw) + b"\r\n"
    return len(head) + len(r.content)


def first_load(c: httpx.Client) -> tuple[int, list]:
    rows = []
    for path in ("/", "/static/app.js", "/static/app.css", "/api/settings", "/api/catalog", "/api/gpus", "/api/families"):
        r = c.get(path)
        r.raise_for_status()
        rows.append((f"GET {path}", _wire_bytes(r)))
    for path, body in (("/api/estimate", {"model": MODEL}),
                       ("/api/compare", {"model": MODEL, "methods": ["qlora", "lora", "full"], "profiles": ["unsloth", "hf"]})):
        r = c.post(path, json=body)
        r.raise_for_status()
        rows.append((f"POST {path}", _wire_bytes(r)))
    return sum(b for _, b in rows), rows


def round_trips(c: httpx.Client, n: int) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        r = c.post("/api/estimate", json={"model": MODEL, "batch_size": 1 + i % 64, "seq_len": 512 * (1 + i % 8)})
        r.json()
        out.append((time.perf_counter() - t) * 1000)
    return out


def page_updates(url: str, n: int) -> list[float]:
    out = []
    clients = [client(url) for _ in range(3)]
    pool = ThreadPoolExecutor(3)
    try:
        for i in range(n):
            body = {"model": MODEL, "batch_size": 1 + i % 64}
            t = time.perf_counter()
            futs = [pool.submit(clients[0].post, "/api/estimate", json=body),
                    pool.submit(clients[1].post, "/api/fit", json={**body, "gpu": "rtx-4090"}),
                    pool.submit(clients[2].post, "/api/compare", json={**body, "methods": ["qlora", "lora", "full"],
                                                                       "profiles": ["unsloth", "hf"], "gpu": "rtx-4090"})]
            for f in futs:
                f.result().json()
            out.append((time.perf_counter() - t) * 1000)
    finally:
        pool.shutdown()
        for c in clients:
            c.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200, help="round trips to time (default: 200)")
    args = ap.parse_args(argv)
    with live_server() as url, client(url) as c:
        total, rows = first_load(c)
        for name, b in rows:
            print(f"  {name:<22} {b:>8,} bytes")
        print(f"first load: {total:,} bytes ({total / 1000:.1f} KB; target <= 300 KB)")
        round_trips(c, 20)  # warm: the model resolved, the formulas compiled
        rt = round_trips(c, args.n)
        print(f"update round-trip (POST /api/estimate, keep-alive): median {statistics.median(rt):.2f} ms, "
              f"p95 {sorted(rt)[int(0.95 * len(rt)) - 1]:.2f} ms over {len(rt)} (target: median <= 50 ms)")
        page_updates(url, 5)
        pu = page_updates(url, max(20, args.n // 5))
        print(f"page update with a GPU (estimate + fit + compare in parallel): median {statistics.median(pu):.2f} ms, "
              f"p95 {sorted(pu)[int(0.95 * len(pu)) - 1]:.2f} ms over {len(pu)}")
        ok = total <= 300_000 and statistics.median(rt) <= 50
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
