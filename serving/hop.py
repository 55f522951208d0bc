"""The hop from an API worker to the Encoder: a call whose connection failed before any answer is sent again.

API workers call the Encoder over keep-alive connections from aiohttp's pool. BentoML starts the
Encoder's uvicorn with its default keep-alive of 5 s and offers no setting for it; aiohttp keeps an
idle connection up to 15 s and reuses the oldest first. A connection that uvicorn closes just as a
busy API worker takes it from the pool (before its event loop has seen the close) fails while the
call is written: ``ClientOSError('Can not write request body ...')``, 9 requests lost at once
under the shipped locustfile (docs/reliability.md). The same happens, without any race, to every
call in flight when the Encoder process dies: the connection drops before an answer.

Encoder calls are pure (token ids in, numbers out), so such a call is sent again: on errors raised
before a response began (the request could not be written, the connection dropped or could not
be made) and on a response cut short (``ClientPayloadError``: the Encoder died while answering);
never on a timeout or an answer with an error status, which a resend would only repeat. The
Encoder's listening socket stays open across a restart (the arbiter holds it), so a resend waits
in its backlog until the new Encoder accepts it. The requests it carries keep their own deadline.

The first resend goes at once: after a keep-alive race it is simply the next call. A dead Encoder,
though, leaves every pooled keep-alive connection to it closed, and the event loop learns of each
close only when it next polls, so a resend sent at once can take another dead connection from the
pool and fail the same way. Later resends therefore wait ``RESEND_AFTER_S`` first, long enough for
the loop to see every close.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aiohttp

Items = TypeVar("Items")
Results = TypeVar("Results")
logger = logging.getLogger("textbento")

# The connection failed before the answer was whole; ServerTimeoutError (a timeout) is not here.
NOT_ANSWERED = (aiohttp.ClientOSError, aiohttp.ClientConnectionResetError, aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)
RESEND_AFTER_S = 0.05


def resend_unanswered(call: Callable[[Items], Awaitable[Results]], attempts: int) -> Callable[[Items], Awaitable[Results]]:
    """``call``, made up to ``attempts`` times while its connection fails before any answer."""

    async def hop(items: Items) -> Results:
        for attempt in range(1, attempts):
            try:
                return await call(items)
            except NOT_ANSWERED as error:
                logger.warning("call to the Encoder not answered (%r): sending it again (attempt %d of %d)", error, attempt + 1, attempts)
                if attempt > 1:
                    await asyncio.sleep(RESEND_AFTER_S)
        return await call(items)

    return hop
