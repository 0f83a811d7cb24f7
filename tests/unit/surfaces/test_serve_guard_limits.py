"""The limits ``vramwise serve`` runs with and the guard's choice of the connection that makes room.

The figures are the documented ones (docs/limits.md, "The server"; docs/robustness.md, the table of
limits): 10 s for a whole request, 5 s for an idle kept-alive connection, 128 open connections, 4
answers computed at once within 20 s each, 64 waiting, a 1 MiB body; the answer is written within the
compute timeout plus 10 s (30 s). The guard is driven with fake transports on the protocol class
:func:`vramwise.surfaces.serve.make_server` builds, so its production limits are the ones exercised;
tests/unit/surfaces/test_serve_load.py runs the same guard over sockets with short deadlines.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from uvicorn.server import ServerState  # noqa: E402

from vramwise.surfaces import serve  # noqa: E402
from vramwise.surfaces.serve_guard import Limits  # noqa: E402

#: docs/robustness.md's table and docs/limits.md, in seconds, counts and bytes
DOCUMENTED = dict(request_deadline=10.0, keep_alive=5.0, answer_deadline=30.0, max_connections=128, workers=4,
                  queue=64, compute_timeout=20.0)


def test_the_server_runs_with_the_documented_limits():
    assert (serve.BODY_TIMEOUT, serve.KEEP_ALIVE, serve.COMPUTE_TIMEOUT) == (10.0, 5.0, 20.0)
    assert (serve.MAX_CONNECTIONS, serve.WORKERS, serve.QUEUE) == (128, 4, 64)
    assert serve.MAX_BODY_BYTES == 1 * 1024 * 1024 and serve.RETRY_AFTER == 1
    # the answer deadline: the compute timeout (20 s) plus 10 s to write it = 30 s
    assert serve.default_limits() == Limits(**DOCUMENTED)
    assert Limits() == Limits(**DOCUMENTED)  # the guard's own defaults are the same


class FakeTransport:
    """What the guard and uvicorn's H11Protocol call on a transport, recorded."""

    def __init__(self):
        self.closed = False
        self.written = b""

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True

    def write(self, data):
        self.written += data

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def set_write_buffer_limits(self, *args, **kwargs):
        pass


@pytest.fixture
def production():
    """The protocol class and uvicorn config of the server make_server builds (default limits)."""
    server, sock, _ = serve.make_server("127.0.0.1", 0)
    sock.close()
    config = server.config
    config.load()
    loop = asyncio.new_event_loop()
    yield config, loop
    loop.close()


def _open(config, loop, state, n):
    out = []
    for _ in range(n):
        proto = config.http_protocol_class(config, state, {}, _loop=loop)
        proto.connection_made(FakeTransport())
        out.append(proto)
    return out


def test_the_129th_connection_closes_the_longest_receiving_one(production):
    config, loop = production
    state = ServerState()
    conns = _open(config, loop, state, 128)  # MAX_CONNECTIONS open: nobody is closed
    assert not any(c.transport.closed for c in conns)
    # the receiving phase's start, set by hand: the oldest is neither the first nor the last opened
    for i, c in enumerate(conns):
        c._vw_since = 1000.0 + i
    conns[57]._vw_since = 10.0
    conns[3]._vw_since = 20.0
    (new,) = _open(config, loop, state, 1)
    closed = [i for i, c in enumerate(conns) if c.transport.closed]
    assert closed == [57] and not new.transport.closed and new.transport.written == b""
    for c in conns + [new]:
        c.connection_lost(None)


def test_a_connection_being_answered_is_never_evicted_and_all_answered_refuses(production):
    config, loop = production
    state = ServerState()
    conns = _open(config, loop, state, 128)
    for i, c in enumerate(conns):
        c._vw_since = 1000.0 + i
    conns[0]._vw_receiving = False  # the oldest receiving start, but being answered
    conns[5]._vw_since = 500.0  # the oldest of those receiving
    _open(config, loop, state, 1)
    assert [i for i, c in enumerate(conns) if c.transport.closed] == [5]
    # every open connection being answered: the new one is refused 503 with Retry-After, nobody else closed
    state2 = ServerState()
    busy = _open(config, loop, state2, 128)
    for c in busy:
        c._vw_receiving = False
    (refused,) = _open(config, loop, state2, 1)
    assert refused.transport.closed and not any(c.transport.closed for c in busy)
    assert refused.transport.written.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in refused.transport.written
    assert b"every one of the 128 connections" in refused.transport.written


def test_a_small_limit_evicts_by_the_receiving_start_not_the_opening_order():
    """The choice itself, on limits of 3 connections: the connection whose receiving phase began first."""
    server, sock, _ = serve.make_server("127.0.0.1", 0, limits=Limits(max_connections=3))
    sock.close()
    config = server.config
    config.load()
    loop = asyncio.new_event_loop()
    try:
        state = ServerState()
        conns = _open(config, loop, state, 3)
        for c, since in zip(conns, (30.0, 10.0, 20.0)):
            c._vw_since = since
        _open(config, loop, state, 1)
        assert [c.transport.closed for c in conns] == [False, True, False]
        # the evicted one is gone from the set only when its transport reports the loss; a closing one is skipped
        conns[0]._vw_since = 5.0
        (fifth,) = _open(config, loop, state, 1)
        assert [c.transport.closed for c in conns] == [True, True, False] and not fifth.transport.closed
    finally:
        loop.close()
