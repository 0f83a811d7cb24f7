"""The connection guard of ``vramwise serve``: uvicorn's HTTP/1.1 protocol (h11) with deadlines and a
connection limit that silent or stalled clients cannot exhaust.

Each connection is in one of two phases:

- **receiving** a request: from the moment the connection opens, or from the end of the previous answer
  on a kept-alive connection. The whole request (headers and body) must arrive within
  :attr:`Limits.request_deadline` seconds; a connection that sent part of a request by then is answered
  ``408`` and closed, one that sent nothing is closed. A kept-alive connection that sends nothing is
  also closed after :attr:`Limits.keep_alive` seconds (uvicorn's own timer).
- **answering**: from the request's last byte until its answer has been written. The answer is computed
  within the application's own timeout (``503`` after it); a client that does not read its answer loses
  the connection :attr:`Limits.answer_deadline` seconds after its request arrived.

At most :attr:`Limits.max_connections` connections are open. When one more opens, the connection that
has been receiving the longest (idle, silent or stalled, never one being answered) is closed to make
room; only when every connection is being answered is the new one refused, ``503`` with ``Retry-After``.
So sockets that send nothing hold a place only until newer connections need it, and never longer than
the request deadline.

The protocol class is uvicorn's ``H11Protocol``; the guard uses its connection set, request cycle and
response-complete hook, which the pinned uvicorn of the ``serve`` extra provides.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

__all__ = ["Limits", "guarded_protocol"]


@dataclass(frozen=True)
class Limits:
    """The server's limits (seconds and counts); :func:`vramwise.surfaces.serve.make_server` takes them."""

    #: seconds for a whole request, headers and body, from the connection's opening or the previous answer
    request_deadline: float = 10.0
    #: seconds a kept-alive connection may sit idle after an answer
    keep_alive: float = 5.0
    #: seconds from a request's last byte until its answer is written (the compute timeout included)
    answer_deadline: float = 30.0
    #: open connections at most; beyond, the longest-receiving one is closed
    max_connections: int = 128
    #: answers computed at once
    workers: int = 4
    #: requests waiting for a worker at most; beyond, 503 with Retry-After at once
    queue: int = 64
    #: seconds to compute one answer
    compute_timeout: float = 20.0


def _raw_answer(status: int, reason: str, message: str, retry_after: int | None = None) -> bytes:
    body = json.dumps({"error": message}).encode()
    head = [f"HTTP/1.1 {status} {reason}", "content-type: application/json",
            f"content-length: {len(body)}", "connection: close"]
    if retry_after is not None:
        head.append(f"retry-after: {retry_after}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def guarded_protocol(limits: Limits):
    """uvicorn's h11 protocol class under ``limits`` (pass it as ``uvicorn.Config(http=...)``)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _vw_timer = None
        _vw_receiving = True  # the phase: receiving a request (True) or answering one (False)
        _vw_since = 0.0  # when the receiving phase began (time.monotonic): the oldest makes room
        _vw_bytes = False  # bytes of a request arrived in this phase
        _vw_answered_cycle = None  # the request cycle whose request has arrived whole

        # -- phases ------------------------------------------------------------------------
        def _vw_arm(self, seconds: float) -> None:
            if self._vw_timer is not None:
                self._vw_timer.cancel()
            self._vw_timer = self.loop.call_later(seconds, self._vw_deadline)

        def _vw_receive(self) -> None:
            self._vw_receiving, self._vw_since, self._vw_bytes = True, time.monotonic(), False
            self._vw_arm(limits.request_deadline)

        def _vw_deadline(self) -> None:
            self._vw_timer = None
            if self.transport is None or self.transport.is_closing():
                return
            if self._vw_receiving and self._vw_bytes and not (self.cycle and self.cycle.response_started):
                self.transport.write(_raw_answer(
                    408, "Request Timeout",
                    f"the request did not arrive whole within {limits.request_deadline:g} s"))
            self.transport.close()

        # -- uvicorn's hooks -----------------------------------------------------------------
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._vw_receive()
            if len(self.connections) <= limits.max_connections:
                return
            waiting = [c for c in self.connections
                       if c is not self and getattr(c, "_vw_receiving", False) and not c.transport.is_closing()]
            if waiting:
                oldest = min(waiting, key=lambda c: c._vw_since)
                oldest.transport.close()
                return
            self.transport.write(_raw_answer(
                503, "Service Unavailable",
                f"every one of the {limits.max_connections} connections is being answered; try again",
                retry_after=1))
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._vw_receiving and data:
                self._vw_bytes = True
            super().data_received(data)
            self._vw_arrived()

        def on_response_complete(self) -> None:
            if not self.transport.is_closing():
                self._vw_receive()
            super().on_response_complete()  # may read a pipelined request already received
            self._vw_arrived()

        def _vw_arrived(self) -> None:
            """Into the answering phase once the current request has arrived whole."""
            cycle = self.cycle
            if (self._vw_receiving and cycle is not None and cycle is not self._vw_answered_cycle
                    and not cycle.more_body and not cycle.response_complete):
                self._vw_answered_cycle = cycle
                self._vw_receiving = False
                self._vw_arm(limits.answer_deadline)

        def connection_lost(self, exc) -> None:
            if self._vw_timer is not None:
                self._vw_timer.cancel()
                self._vw_timer = None
            super().connection_lost(exc)

    return GuardedH11Protocol
