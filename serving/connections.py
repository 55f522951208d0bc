"""Connection timeouts that uvicorn, as BentoML 1.4.40 runs it, lacks or does not let us set.

- **Headers deadline.** uvicorn starts no timer when a connection opens, and stops its keep-alive
  timer at the first byte of a request: a client that connects and sends nothing, or sends a
  header line every few seconds, holds its connection (a file descriptor) forever. Here a
  request's headers must be complete within ``header_timeout_s`` of its first byte (or of the
  connection opening); otherwise the connection is closed.
- **Body deadline.** uvicorn hands a request to the app once its headers are complete, and its
  keep-alive timer restarts only when an answer ends; a body that trickles in after its answer
  (a 401 or 404 sent without reading it) held its connection forever. A request's body must be
  complete within ``body_timeout_s`` of its headers, plus ``BODY_GRACE_S``; otherwise the
  connection is closed. The app answers a late body itself, 408, at ``body_timeout_s``
  (``api/middleware.ReadBodyFirst``): the grace is its time to do so.
- **Idle keep-alive per service.** BentoML passes ``bentoml serve --timeout-keep-alive`` to the
  public server only and starts the Encoder with uvicorn's default (5 s), shorter than the 15 s
  for which BentoML's client (aiohttp) keeps an idle connection to reuse: the server closing a
  connection just as the client reuses it was the failed hop of serving/hop.py. Each service sets
  its own here, and the Encoder's outlasts its client's.

Each open connection holds a file descriptor, and container runtimes differ in the soft limit they
give (1,024 under some): ``raise_open_files_limit`` lifts it to the hard limit, as Go's runtime does.

uvicorn parses with httptools when it is installed (pinned in requirements/serve-*.txt); these
limits patch that protocol class and refuse to start if uvicorn would use another.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from dataclasses import dataclass, field

from uvicorn.protocols.http import auto, httptools_impl

logger = logging.getLogger("textbento")
Protocol = httptools_impl.HttpToolsProtocol


BODY_GRACE_S = 1.0  # past the body deadline, for the app's own 408 to go out before the connection is closed


@dataclass
class Limits:
    header_timeout_s: float | None = None
    body_timeout_s: float | None = None
    keep_alive_s: float | None = None
    open: int = 0  # connections this process's server holds now
    requests: set = field(default_factory=set)  # uvicorn's tasks: the requests it is answering now


def open_connections() -> int:
    """HTTP connections this process's server holds now (``textbento_held``)."""
    return LIMITS.open


def requests_in_progress() -> int:
    """HTTP requests this process's server is answering now, every route's."""
    return len(LIMITS.requests)


LIMITS = Limits()


def limit_connections(*, header_timeout_s: float, body_timeout_s: float, keep_alive_s: float) -> None:
    """Applies to every connection this process's uvicorn accepts from now on, and raises its open-files limit."""
    raise_open_files_limit()
    if auto.AutoHTTPProtocol is not Protocol:
        raise RuntimeError("uvicorn does not parse HTTP with httptools here (pinned in requirements/serve-*.txt)")
    if LIMITS.header_timeout_s is None:
        _patch(Protocol)
    LIMITS.header_timeout_s, LIMITS.body_timeout_s, LIMITS.keep_alive_s = header_timeout_s, body_timeout_s, keep_alive_s


# Each connection's two clocks: one request's headers, then its body, are read at a time.
HEADERS, BODY = "headers_deadline", "body_deadline"


def _patch(protocol: type) -> None:
    connection_made, connection_lost = protocol.connection_made, protocol.connection_lost
    on_message_begin, on_headers_complete = protocol.on_message_begin, protocol.on_headers_complete
    on_message_complete = protocol.on_message_complete

    def _connection_made(self, transport: asyncio.Transport) -> None:
        connection_made(self, transport)
        LIMITS.open += 1
        LIMITS.requests = self.tasks  # one set per server, shared by its connections
        self.timeout_keep_alive = LIMITS.keep_alive_s
        _start_clock(self, HEADERS, LIMITS.header_timeout_s)

    def _on_message_begin(self) -> None:
        on_message_begin(self)
        _start_clock(self, HEADERS, LIMITS.header_timeout_s)

    def _on_headers_complete(self) -> None:
        _stop_clock(self, HEADERS)
        on_headers_complete(self)
        _start_clock(self, BODY, LIMITS.body_timeout_s + BODY_GRACE_S)

    def _on_message_complete(self) -> None:
        _stop_clock(self, BODY)
        on_message_complete(self)

    def _connection_lost(self, exc: Exception | None) -> None:
        _stop_clock(self, HEADERS)
        _stop_clock(self, BODY)
        LIMITS.open -= 1
        connection_lost(self, exc)

    protocol.connection_made, protocol.connection_lost = _connection_made, _connection_lost
    protocol.on_message_begin, protocol.on_headers_complete = _on_message_begin, _on_headers_complete
    protocol.on_message_complete = _on_message_complete


def _start_clock(connection, name: str, seconds: float) -> None:
    _stop_clock(connection, name)
    setattr(connection, name, connection.loop.call_later(seconds, _too_slow, connection, name))


def _stop_clock(connection, name: str) -> None:
    if (deadline := getattr(connection, name, None)) is not None:
        deadline.cancel()
        setattr(connection, name, None)


def _too_slow(connection, name: str) -> None:
    setattr(connection, name, None)
    if not connection.transport.is_closing():
        connection.transport.close()


def raise_open_files_limit() -> int:
    """Sets this process's soft limit on open files to its hard limit; returns the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 2**20  # the kernel refuses an infinite soft limit
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target
