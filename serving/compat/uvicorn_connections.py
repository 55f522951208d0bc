"""Connection deadlines that uvicorn's httptools protocol lacks, and the counters textbento reads from it.

- **Headers deadline.** uvicorn starts no timer when a connection opens, and stops its keep-alive
  timer at the first byte of a request: a client that connects and sends nothing, or sends a
  header line every few seconds, holds its connection (a file descriptor) forever. Here a
  request's headers must be complete within ``header_timeout_s`` of its first byte (or of the
  connection opening); otherwise the connection is closed.
- **Body deadline.** uvicorn hands a request to the app once its headers are complete, and its
  keep-alive timer restarts only when an answer ends; a body that trickles in after its answer
  (a 401 or 404 sent without reading it) holds its connection forever. A request's body must be
  complete within ``body_timeout_s`` of its headers, plus ``BODY_GRACE_S``; otherwise the
  connection is closed. The app answers a late body itself, 408, at ``body_timeout_s``
  (``api/middleware.ReadBodyFirst``): the grace is its time to do so.
- **Lingering close.** uvicorn closes a connection as soon as an answer without keep-alive ends (the
  client sent ``Connection: close``, or the server is stopping). If the request's body is still
  arriving (a 413 or 503 refused on its ``Content-Length`` or its first megabytes), the socket holds
  unread bytes, and the kernel answers them with a reset that can destroy the answer before the
  client reads it. Such a close half-closes instead (the answer, then FIN), reads and drops the rest of
  the body, and closes when the body ends, when the client closes or stays silent for the idle
  keep-alive, and at the body deadline at the latest: nginx's and Apache's lingering close.
- **Idle keep-alive per service.** BentoML passes ``bentoml serve --timeout-keep-alive`` to the
  public server only and starts the Encoder with uvicorn's default (5 s), shorter than the 15 s
  for which BentoML's client (aiohttp) keeps an idle connection to reuse: the server closing a
  connection just as the client reuses it fails the call (serving/hop.py). Each service sets its
  own, and the Encoder's outlasts its client's.

The patched protocol also counts the connections it holds and shares uvicorn's set of request tasks
(``serving/connections.py`` reads both). Until ``LIMITS`` holds a service's values
(``serving.connections.limit_connections``), a connection has uvicorn's own timeouts.
uvicorn parses with httptools when it is installed (pinned in requirements/serve-*.txt); this patch
refuses to start if uvicorn would use another protocol.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from uvicorn.protocols.http import auto, httptools_impl

Protocol = httptools_impl.HttpToolsProtocol
BODY_GRACE_S = 1.0  # past the body deadline, for the app's own 408 to go out before the connection is closed
# Each connection's two clocks: one request's headers, then its body, are read at a time.
HEADERS, BODY = "headers_deadline", "body_deadline"
PATCHED = ("connection_made", "connection_lost", "on_message_begin", "on_headers_complete", "on_message_complete")
# uvicorn's own methods, as they were before any patch (tests/test_compat.py checks what they still lack).
STOCK = {name: getattr(Protocol, name) for name in PATCHED}


@dataclass
class Limits:
    header_timeout_s: float | None = None
    body_timeout_s: float | None = None
    keep_alive_s: float | None = None
    open: int = 0  # connections this process's server holds now


LIMITS = Limits()


def applied() -> bool:
    return Protocol.connection_made is not STOCK["connection_made"]


def apply() -> None:
    """Every connection uvicorn's httptools protocol accepts from now on keeps to ``LIMITS`` (twice changes nothing)."""
    if auto.AutoHTTPProtocol is not Protocol:
        raise RuntimeError("uvicorn does not parse HTTP with httptools here (pinned in requirements/serve-*.txt)")
    if not applied():
        for name, method in limited(STOCK).items():
            setattr(Protocol, name, method)


def limited(stock: dict) -> dict:
    """The protocol's methods in ``PATCHED``, each calling its ``stock`` one and keeping a connection's clocks."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        stock["connection_made"](self, transport)
        self.body_arriving = self.lingering = False
        LIMITS.open += 1
        if LIMITS.keep_alive_s is not None:
            self.timeout_keep_alive = LIMITS.keep_alive_s
        _start_clock(self, HEADERS, LIMITS.header_timeout_s)

    def on_message_begin(self) -> None:
        stock["on_message_begin"](self)
        _start_clock(self, HEADERS, LIMITS.header_timeout_s)

    def on_headers_complete(self) -> None:
        _stop_clock(self, HEADERS)
        self.body_arriving, previous = True, self.cycle
        stock["on_headers_complete"](self)
        if self.cycle is not previous:  # a request's cycle (not a protocol upgrade): what it closes when no keep-alive is due
            self.cycle.transport = LingeringClose(self)
        _start_clock(self, BODY, None if LIMITS.body_timeout_s is None else LIMITS.body_timeout_s + BODY_GRACE_S)

    def on_message_complete(self) -> None:
        _stop_clock(self, BODY)
        self.body_arriving = False
        stock["on_message_complete"](self)
        if self.lingering:
            self.transport.close()  # the answer is out and every byte of the body read: nothing left to reset

    def connection_lost(self, exc: Exception | None) -> None:
        _stop_clock(self, HEADERS)
        _stop_clock(self, BODY)
        LIMITS.open -= 1
        stock["connection_lost"](self, exc)

    return {
        "connection_made": connection_made,
        "connection_lost": connection_lost,
        "on_message_begin": on_message_begin,
        "on_headers_complete": on_headers_complete,
        "on_message_complete": on_message_complete,
    }


class LingeringClose:
    """A connection's transport as its request's cycle sees it: closed while the request's body is still
    arriving, it half-closes and lingers (the module's "Lingering close"); otherwise it is the transport."""

    def __init__(self, connection) -> None:
        self.connection, self.transport = connection, connection.transport
        # What the cycle calls per answer, bound once: through __getattr__ each cost a failed lookup first (µs, per request).
        self.write, self.is_closing = self.transport.write, self.transport.is_closing

    def __getattr__(self, name: str):
        return getattr(self.transport, name)

    def close(self) -> None:
        connection, transport = self.connection, self.transport
        if not connection.body_arriving or connection.lingering or transport.is_closing() or not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()  # after the answer already written
        connection.lingering = True


def _start_clock(connection, name: str, seconds: float | None) -> None:
    _stop_clock(connection, name)
    if seconds is not None:
        setattr(connection, name, connection.loop.call_later(seconds, _too_slow, connection, name))


def _stop_clock(connection, name: str) -> None:
    if (deadline := getattr(connection, name, None)) is not None:
        deadline.cancel()
        setattr(connection, name, None)


def _too_slow(connection, name: str) -> None:
    setattr(connection, name, None)
    if not connection.transport.is_closing():
        connection.transport.close()
