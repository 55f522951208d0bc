"""The hop from an API worker to the Encoder: a call the Encoder never read is sent again; the texts of a
call it stopped answering are sent again alone, so that a text that kills it fails alone.

The two kinds below hold for both ways to the Encoder; the socket hop's errors are told apart in
``serving/socket_hop.py`` (``NotSent``, ``CutShort``), and what follows is the HTTP hop's case.
API workers call the Encoder over keep-alive connections from aiohttp's pool. A connection that the
Encoder's server closes just as a busy API worker takes it from the pool (before its event loop has
seen the close) fails while the call is written: ``ClientOSError('Can not write request body ...')``
or a broken pipe (docs/reliability.md, "The failed hop"). Such a call never reached the model
(``unsent``): it is sent again whole, up to ``attempts`` times. The first resend goes at once: after
a keep-alive race it is simply the next call. A dead Encoder, though, leaves every pooled keep-alive
connection to it closed, and the event loop learns of each close only when it next polls, so a
resend sent at once can take another dead connection from the pool and fail the same way. Later
resends therefore wait ``RESEND_AFTER_S`` first, long enough for the loop to see every close.

A call that was written and whose connection then dropped before the whole answer (the server
disconnected, or cut its answer short) is one the Encoder may have died computing, and maybe because
of one of its texts: one long text can exhaust its memory. Sent again whole, it would kill each new
Encoder in turn and fail every request merged into it. Its texts are sent again alone instead, one at
a time, once each: a text the Encoder answers alone gets its answer, one whose lone call drops too is
answered with ``ItemFailed`` (the model failed on that text) and fails only the request that carried
it (``serving/coalesce.py``). Lone calls wait for each other across the API workers of a server
(``LoneCalls``), so a text that kills the Encoder alone takes no other lone call with it, and the
Encoder's batcher never merges two of them into one pass.

Encoder calls are pure (token ids in, numbers out), so any of this is safe; never on a timeout or an
answer with an error status, which a resend would only repeat. The Encoder's listening socket stays
open across a restart (the arbiter holds it), so a resend waits in its backlog until the new Encoder
accepts it; the requests it carries keep their own deadline.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from .coalesce import ItemFailed
from .socket_hop import CutShort, NotSent

Item = TypeVar("Item")
Result = TypeVar("Result")
logger = logging.getLogger("textbento")

# The connection failed before the answer was whole (HTTP, or the socket hop); ServerTimeoutError (a timeout) is not here.
NOT_ANSWERED = (
    aiohttp.ClientOSError,
    aiohttp.ClientConnectionResetError,
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientPayloadError,
    NotSent,
    CutShort,
)
RESEND_AFTER_S = 0.05
LOCK_POLL_S = 0.01
FAILED_ALONE = "the Encoder stopped while computing this text, with other texts and then alone"


def unsent(error: BaseException) -> bool:
    """Whether the Encoder never read the call: no connection was made, or the call was written into a
    connection it had closed (aiohttp could not write the request, or the socket said so: a broken pipe,
    or a reset on what the server left unread). An Encoder that read a call and died computing it closes
    the connection cleanly (``ServerDisconnectedError``) or cuts its answer short (``ClientPayloadError``)."""
    if isinstance(error, (aiohttp.ClientConnectorError, aiohttp.ClientConnectionResetError, NotSent)):
        return True
    return isinstance(error, aiohttp.ClientOSError) and (
        error.errno in (errno.EPIPE, errno.ECONNRESET) or "Can not write request body" in str(error)
    )


class LoneCalls:
    """At most one lone call in flight across the API workers of one server (an exclusive lock on a file
    of theirs: in the metrics directory BentoML empties as the server starts, else in the temporary one,
    named after their parent, the arbiter); within a worker, an asyncio lock. Where the file cannot be
    opened, the worker's own lock alone."""

    def __init__(self, name: str, directory: str | None = None) -> None:
        self.name, self.directory = name, directory
        self.local = asyncio.Lock()

    @property
    def path(self) -> Path:
        # Read when used: BentoML sets the metrics directory after importing the service.
        directory = self.directory or os.environ.get("PROMETHEUS_MULTIPROC_DIR") or tempfile.gettempdir()
        return Path(directory, f"textbento-lone-calls-{os.getppid()}-{self.name}.lock")

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        async with self.local:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as error:
                logger.warning("lone calls to the Encoder wait for this worker's own only: %s", error)
                yield
                return
            try:
                while True:  # polled, not blocking a thread: a cancelled wait leaves nothing behind
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        await asyncio.sleep(LOCK_POLL_S)
                yield
            finally:
                os.close(fd)  # releases the lock


def resend_unanswered(
    call: Callable[[list[Item]], Awaitable[list[Result]]], attempts: int, lone: LoneCalls | None = None
) -> Callable[[list[Item]], Awaitable[list[Any]]]:
    """``call``, sent again whole while the Encoder never read it (up to ``attempts`` times), and text by
    text, alone and once each, when its connection dropped after it was written; ``attempts`` 1: never again."""
    lone = lone or LoneCalls("encoder")

    async def sent(items: list[Item]) -> list[Result]:
        for attempt in range(1, attempts):
            try:
                return await call(items)
            except NOT_ANSWERED as error:
                if not unsent(error):
                    raise
                logger.warning("call to the Encoder not sent (%r): sending it again (attempt %d of %d)", error, attempt + 1, attempts)
                if attempt > 1:
                    await asyncio.sleep(RESEND_AFTER_S)
        return await call(items)

    async def alone(item: Item) -> Result | BaseException:
        async with lone.held():
            try:
                (result,) = await sent([item])
                return result
            except NOT_ANSWERED as error:
                if unsent(error):
                    return error
                logger.error(
                    "the Encoder stopped again computing one text alone (%r): that text fails, its call's others are answered", error
                )
                return ItemFailed(FAILED_ALONE)
            except Exception as error:  # unreachable, timed out, an error status: this text's answer
                return error

    async def hop(items: list[Item]) -> list[Any]:
        try:
            return await sent(items)
        except NOT_ANSWERED as error:
            if attempts == 1 or unsent(error):
                raise
            logger.warning("the Encoder stopped answering a call of %d text(s) (%r): sending it again, each text alone", len(items), error)
        await asyncio.sleep(RESEND_AFTER_S)  # the pooled connections a dead Encoder left: seen closed first
        answers = [await alone(item) for item in items]
        if all(isinstance(answer, BaseException) and not isinstance(answer, ItemFailed) for answer in answers):
            raise answers[0]  # the Encoder is out of reach for every one of them: as any failed call
        return answers

    return hop
