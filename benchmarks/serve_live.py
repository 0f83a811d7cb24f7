"""A real `vramwise serve` (uvicorn) on a free loopback port, in a thread: for bench_serve.py and the live
and browser tests (pytest has benchmarks/ on its path)."""

from __future__ import annotations

import contextlib
import threading
import time


@contextlib.contextmanager
def live_server(host: str = "127.0.0.1"):
    from vramwise.surfaces.serve import make_server

    server, sock, url = make_server(host, 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
