"""The API workers' calls to an Encoder without HTTP: length-framed pickles on a Unix socket of the
Encoder's own, into the same BentoML batcher as an HTTP call.

BentoML's hop costs a one-text request about 3 ms (its client, its HTTP server and their layers
around the batcher) where a bare round trip between two processes takes 0.05 ms (docs/design.md 8).
So each Encoder also listens on a socket of its own: a call is an 8-byte length and the pickled token
ids (``serving/wire.py``), its answer a length and the pickled ``(status, rows or error message)``.
What an HTTP call gets, a socket call gets too: BentoML's batcher (``compat.bentoml_batcher.batcher``),
the Encoder's timeout (504), its errors by status, the drain's count of callers (``serving/connections.py``),
and the resends and lone calls of ``serving/hop.py``: a call written into a connection the Encoder had
closed is ``NotSent``, one whose answer never came whole ``CutShort``. An API worker that gives a call
up closes its connection; the Encoder skips that call's texts when told (``serving/gone.py``), as over HTTP.

The socket lies in a directory of the server's own (its user's and its supervisor's, mode 0700: a
pickle is code, so only the server's processes may send one). An Encoder that dies takes its socket
with it, while the supervisor keeps its HTTP socket open across the restart: where the socket cannot
be reached, calls go by HTTP and the socket is tried again ``RETRY_SOCKET_S`` later. Traces follow
HTTP calls only, so with an OTLP endpoint set (or ``TEXTBENTO_ENCODER_HOP=http``) every call goes by HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import pickle
import socket
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from pathlib import Path
from struct import Struct
from typing import Any

from bentoml.exceptions import BentoMLException

from .settings import ENCODER_KEEP_ALIVE_S, settings
from .telemetry import telemetry

logger = logging.getLogger("textbento")
HEAD = Struct("<Q")  # the pickled frame's length
OK = 200
RETRY_SOCKET_S = 1.0
# A caller closes a connection idle this long, as BentoML's HTTP client does its own, well before the
# Encoder would (``ENCODER_KEEP_ALIVE_S``): no idle close on the Encoder's side races a call.
CALLER_IDLE_S = 15.0


@dataclass
class Held:
    """What this process's socket server holds now."""

    connections: int = 0


HELD = Held()


class HopFailed(ConnectionError):
    """A socket call that got no answer."""


class NotSent(HopFailed):
    """The call never reached the Encoder: its connection was closed before the call was written, or with it unread."""


class CutShort(HopFailed):
    """The call was written, and its connection closed before the whole answer came back."""


def socket_path(model: str) -> Path | None:
    """Where ``model``'s Encoder listens in this server (the processes of one ``bentoml serve`` share
    their parent, the supervisor); None where the hop is HTTP."""
    if not settings.socket_hop:
        return None
    directory = Path(tempfile.gettempdir(), f"textbento-{os.getuid()}-{os.getppid()}")
    return directory / f"{hashlib.sha256(model.encode()).hexdigest()[:16]}.sock"  # a socket's path is short


def private(directory: Path) -> bool:
    """Whether ``directory`` is this user's alone, so that only the server's own processes can have made a socket in it."""
    try:
        found = directory.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid() and not found.st_mode & 0o077


def frame(value: Any) -> bytes:
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return HEAD.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> Any:
    (size,) = HEAD.unpack(await reader.readexactly(HEAD.size))
    return pickle.loads(await reader.readexactly(size))


class Listening:
    """The Encoder's socket, each connection to it answered on its loop by ``Answering``; none where the hop is HTTP."""

    def __init__(self, model: str, answer: Callable[[Any], Awaitable[Any]]) -> None:
        """Made now, in the Encoder and on its running loop, so that calls wait in its backlog until the loop accepts them."""
        self.path, self.server = socket_path(model), None
        if self.path is None:
            return
        try:
            listening = self.bound(self.path)
        except OSError as error:  # a read-only or foreign temporary directory, say
            logger.warning("the calls to this Encoder go by HTTP: %s", error)
            self.path = None
            return
        loop = asyncio.get_running_loop()
        self.server = loop.create_task(loop.create_unix_server(partial(Answering, answer), sock=listening))
        self.server.add_done_callback(partial(self.started, listening))

    def started(self, listening: socket.socket, server: asyncio.Task) -> None:
        """Where its server did not start, the socket goes, lest calls wait in a backlog no one accepts."""
        if server.cancelled() or server.exception() is None:
            return
        logger.error("the calls to this Encoder go by HTTP: its socket's server did not start (%r)", server.exception())
        listening.close()
        self.close()

    @staticmethod
    def bound(path: Path) -> socket.socket:
        """A socket listening at ``path``, in a directory of this user's alone."""
        with contextlib.suppress(FileExistsError):
            path.parent.mkdir(mode=0o700)
        if not private(path.parent):
            raise PermissionError(f"{path.parent} is not a directory of this user's alone")
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a dead predecessor's
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listening.bind(str(path))
        listening.listen(1024)
        return listening

    def close(self) -> None:
        """Removes the socket (its directory too, by the server's last Encoder to stop); calls in progress are answered."""
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
                self.path.parent.rmdir()


class Answering(asyncio.Protocol):
    """One caller's connection, in the Encoder: its calls one after another (a caller sends the next only
    after the last answer), each in a task of its own while it is answered, as uvicorn runs a request;
    an idle connection holds no task, and is closed after ``ENCODER_KEEP_ALIVE_S``."""

    def __init__(self, answer: Callable[[Any], Awaitable[Any]]) -> None:
        self.answer = answer
        self.received = bytearray()
        self.transport: asyncio.Transport | None = None
        self.idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        HELD.connections += 1
        self.transport = transport  # type: ignore[assignment]
        self.wait_for_a_call()

    def connection_lost(self, error: Exception | None) -> None:
        HELD.connections -= 1
        if self.idle is not None:
            self.idle.cancel()

    def wait_for_a_call(self) -> None:
        self.idle = asyncio.get_running_loop().call_later(ENCODER_KEEP_ALIVE_S, self.transport.close)

    def data_received(self, data: bytes) -> None:
        self.received += data
        if len(self.received) < HEAD.size:
            return
        (size,) = HEAD.unpack_from(self.received)
        if len(self.received) < HEAD.size + size:
            return
        call = pickle.loads(bytes(self.received[HEAD.size : HEAD.size + size]))
        del self.received[: HEAD.size + size]
        self.idle.cancel()
        asyncio.get_running_loop().create_task(self.respond(call))

    async def respond(self, call: Any) -> None:
        try:
            async with asyncio.timeout(settings.timeout_s):  # no task of its own, as wait_for would make
                answered = (OK, await self.answer(call))
        except TimeoutError:
            answered = (HTTPStatus.GATEWAY_TIMEOUT, "the Encoder did not answer in time")
        except BentoMLException as error:  # BentoML's batcher shedding (503), among others
            answered = (int(error.error_code), str(error))
        except Exception as error:
            logger.exception("an Encoder call failed")
            answered = (HTTPStatus.INTERNAL_SERVER_ERROR, repr(error))
        if not self.transport.is_closing():  # else the caller left (it gave the call up)
            self.transport.write(frame(answered))
            self.wait_for_a_call()


class SocketCalls:
    """An API worker's calls to one Encoder: on its socket, or by ``http`` while the socket cannot be reached."""

    def __init__(self, path: Path, http: Callable[[Any], Awaitable[Any]], model: str) -> None:
        self.path, self.http, self.model = path, http, model
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []
        self.http_until = 0.0  # calls go by HTTP until then (time.monotonic()); 0: the socket answered last
        self.sweeping: asyncio.TimerHandle | None = None

    async def __call__(self, call: Any) -> Any:
        connection = await self.connection()
        if connection is None:
            telemetry.encoder_call(self.model, "http")
            return await self.http(call)
        telemetry.encoder_call(self.model, "socket")
        reader, writer = connection
        try:
            try:
                writer.write(frame(call))
                await writer.drain()
            except ConnectionError as error:
                self.drop_idle()  # the Encoder closed this one: it may have closed them all
                raise NotSent(f"the Encoder's connection was closed before the call: {error!r}") from error
            try:
                status, answer = await read_frame(reader)
            except ConnectionResetError as error:  # closed with the call unread: the Encoder never got it
                self.drop_idle()
                raise NotSent(f"the Encoder's connection was closed with the call unread: {error!r}") from error
            except (asyncio.IncompleteReadError, ConnectionError) as error:  # closed after reading it: died computing it?
                self.drop_idle()
                raise CutShort(f"the Encoder's connection closed before its answer: {error!r}") from error
        except BaseException:  # also cancelled (its requests gone or overdue): no one would read that answer
            writer.close()
            raise
        self.keep(reader, writer)
        if status != OK:
            raise BentoMLException(answer, error_code=HTTPStatus(status))
        return answer

    async def connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """An idle connection of this worker's, a new one, or None: the socket cannot be reached now."""
        now = time.monotonic()
        while self.idle:
            reader, writer, since = self.idle.pop()
            if now - since < CALLER_IDLE_S and not reader.at_eof() and not writer.is_closing():
                return reader, writer
            writer.close()
        if now < self.http_until:
            return None
        try:
            if not private(self.path.parent):
                raise FileNotFoundError(f"no directory of this user's alone at {self.path.parent}")
            connection = await asyncio.open_unix_connection(self.path)
        except OSError as error:  # no Encoder listening there: starting, restarting, or served elsewhere
            if not self.http_until:
                logger.warning("the Encoder's socket cannot be reached (%r): its calls go by HTTP until it can", error)
            self.http_until = now + RETRY_SOCKET_S
            return None
        if self.http_until:
            logger.info("the Encoder's socket answers again: its calls go by it")
            self.http_until = 0.0
        return connection

    def keep(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.idle.append((reader, writer, time.monotonic()))
        if self.sweeping is None:
            self.sweeping = asyncio.get_running_loop().call_later(CALLER_IDLE_S, self.sweep)

    def sweep(self) -> None:
        """Closes the connections idle ``CALLER_IDLE_S`` or longer; again later while any is kept."""
        now, kept = time.monotonic(), []
        for reader, writer, since in self.idle:
            if now - since < CALLER_IDLE_S:
                kept.append((reader, writer, since))
            else:
                writer.close()
        self.idle = kept
        self.sweeping = asyncio.get_running_loop().call_later(CALLER_IDLE_S, self.sweep) if kept else None

    def drop_idle(self) -> None:
        for _, writer, _ in self.idle:
            writer.close()
        self.idle.clear()


def calls(model: str, http: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
    """An API worker's calls to ``model``'s Encoder: on its socket, ``http`` where it cannot be reached or the hop is HTTP."""
    path = socket_path(model)
    if path is not None:
        return SocketCalls(path, http, model)

    async def by_http(call: Any) -> Any:
        telemetry.encoder_call(model, "http")
        return await http(call)

    return by_http
