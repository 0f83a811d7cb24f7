"""A real server on loopback keeps serving after a bounded loop of bad requests of every kind, and
`vramwise serve` warns when it listens beyond loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from urllib.parse import urlparse

import pytest

pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

import vramwise  # noqa: E402
from vramwise.surfaces import serve as _serve  # noqa: E402

from serve_live import live_server  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B"


def _raw(host: str, port: int, payload: bytes, *, read: bool = True) -> bytes:
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(payload)
        if not read:
            return b""
        try:
            return s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            return b""


def test_bad_requests_in_a_loop_leave_the_server_serving(monkeypatch):
    monkeypatch.setattr(_serve, "BODY_TIMEOUT", 0.5)  # the slow-body case below waits this long
    expected = vramwise.estimate(MODEL, batch_size=2).total
    with live_server() as url:
        u = urlparse(url)
        host, port = u.hostname, u.port
        bad_bodies = [b"{", b"[]", b"null", b"\xff\xfe\x00", b"[" * 100_000, b'{"model": 1}', b'{"a": 1e999}',
                      json.dumps({"model": MODEL, "batch_size": -1}).encode(),
                      json.dumps({"model": "/etc/passwd"}).encode(),
                      json.dumps({"config_text": "{" * 10_000}).encode(),
                      json.dumps({"config": {"model_type": "llama", "hidden_size": "huge"}}).encode(),
                      b"x" * (2**20 + 10)]
        raw_garbage = [b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00",
                       b"POST /api/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n",
                       b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                       b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"b" * 100_000 + b"\r\n\r\n"]
        statuses = []
        with httpx.Client(base_url=url, timeout=10) as c:
            for round_ in range(3):
                for body in bad_bodies:
                    r = c.post("/api/estimate", content=body, headers={"content-type": "application/json"})
                    statuses.append(r.status_code)
                    assert 400 <= r.status_code < 500, (body[:40], r.status_code, r.text[:200])
                    assert "Traceback" not in r.text
                for payload in raw_garbage:
                    _raw(host, port, payload)
                # a body that never finishes: answered 408 after BODY_TIMEOUT, the server goes on
                slow = (b"POST /api/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 100\r\n\r\n{\"model\":")
                answer = _raw(host, port, slow)
                assert b" 408 " in answer.split(b"\r\n", 1)[0], answer[:100]
                # a client that disconnects mid-request
                _raw(host, port, b"POST /api/fit HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 50\r\n\r\n{", read=False)
                r = c.post("/api/estimate", json={"model": MODEL, "batch_size": 2})
                assert r.status_code == 200 and r.json()["total"] == expected
        assert len(statuses) == 3 * len(bad_bodies)


def test_serve_warns_beyond_loopback_and_says_where():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for host, warned in (("0.0.0.0", True), ("127.0.0.1", False)):
        p = subprocess.Popen([sys.executable, "-m", "vramwise", "serve", "--host", host, "--port", "0"],
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
        try:
            lines = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                line = p.stderr.readline()
                if not line:
                    break
                lines.append(line)
                if "Ctrl-C" in line:
                    break
            text = "".join(lines)
            assert "vramwise serve: http://" in text, text
            assert ("warning: listening on 0.0.0.0" in text) == warned, text
        finally:
            p.terminate()
            p.wait(10)
