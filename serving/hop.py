"""The hop from an API worker to the Encoder: a call whose connection failed before any answer is sent again.

API workers call the Encoder over keep-alive connections from aiohttp's pool. BentoML starts the
Encoder's uvicorn with its default keep-alive of 5 s and offers no setting for it; aiohttp keeps an
idle connection up to 15 s and reuses the oldest first. A connection that uvicorn closes just as a
busy API worker takes it from the pool (before its event loop has seen the close) fails while the
call is written: ``ClientOSError('Can not write request body ...')``, 9 requests lost at once
under the shipped locustfile (docs/reliability.md). The same happens, without any race, to every
call in flight when the Encoder process dies: the connection drops before an answer.

Encoder calls are pure (token ids in, numbers out), so such a call is sent again: only on errors
raised before a response began (the request could not be written, the connection dropped or
could not be made); never after a response started (a cut body is ``ClientPayloadError``), and
never on a timeout or an answer with an error status. The resend goes at once, because the
Encoder's listening socket stays open across a restart (the arbiter holds it): the call waits
in its backlog until the new Encoder accepts it. The requests it carries keep their own deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aiohttp

Items = TypeVar("Items")
Results = TypeVar("Results")
logger = logging.getLogger("textbento")

# Raised before any byte of a response was read; ServerTimeoutError and ClientPayloadError are not here.
NOT_ANSWERED = (aiohttp.ClientOSError, aiohttp.ClientConnectionResetError, aiohttp.ServerDisconnectedError)


def resend_unanswered(call: Callable[[Items], Awaitable[Results]], attempts: int) -> Callable[[Items], Awaitable[Results]]:
    """``call``, made up to ``attempts`` times while its connection fails before any answer."""

    async def hop(items: Items) -> Results:
        for attempt in range(1, attempts):
            try:
                return await call(items)
            except NOT_ANSWERED as error:
                logger.warning("call to the Encoder not answered (%r): sending it again (attempt %d of %d)", error, attempt + 1, attempts)
        return await call(items)

    return hop
