"""No work for clients that are gone, nor for requests past their deadline.

A client that times out or disconnects leaves its request's work behind. Under overload the
Encoder then computes answers nobody reads while the clients still waiting (and those retrying)
queue behind them, and the rate of useful answers falls as load rises. So a request's work is
dropped wherever it waits once nobody is waiting for it:

- in the API worker, ``api.middleware.CancelWhenGone`` cancels the request when its connection
  closes before the answer starts: a tokenization under way is discarded, and the coalescer drops
  the request's texts not yet sent (``serving/coalesce.py``);
- texts already sent carry their request's key and deadline (``serving/wire.py``); the API worker
  tells the Encoder the keys of requests that were given up (``Forgetter``: batched, one call in
  flight), and the Encoder leaves out forgotten and overdue texts before each forward pass
  (``Dropped.wanted``). A pass already running finishes.

A request's deadline is now + the least of ``TEXTBENTO_TIMEOUT_S`` and the timeout its client or
proxy announced (``deadline_of``): Envoy's ``x-envoy-expected-rq-timeout-ms`` (Istio sets it from
the route's timeout) and the OpenAI SDKs' ``x-stainless-read-timeout`` (seconds, sent with every
request).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar

from .coalesce import Coalescer
from .telemetry import telemetry
from .wire import Text

logger = logging.getLogger("textbento")

# The announced timeouts, each with its header and how many of its units make a second.
DEADLINE_HEADERS = {"x-envoy-expected-rq-timeout-ms": 1000.0, "x-stainless-read-timeout": 1.0}
# The current request's deadline (time.time()), set by api.middleware.CancelWhenGone.
deadline: ContextVar[float | None] = ContextVar("deadline", default=None)
# Keys: unique across the API workers of a pod (their pids differ), so an Encoder can tell requests apart.
_keys = itertools.count(1)


def new_key() -> int:
    return (os.getpid() << 32) | (next(_keys) & 0xFFFFFFFF)


def deadline_of(headers: Mapping[str, str], timeout_s: float, now: float) -> float:
    """The request's deadline from the announced timeouts in ``headers`` (lower-case names), at most ``timeout_s`` away.
    A malformed or non-positive value is a ``ValueError`` naming its header."""
    seconds = timeout_s
    for name, per_second in DEADLINE_HEADERS.items():
        if name in headers:
            try:
                announced = float(headers[name]) / per_second
            except ValueError:
                announced = -1.0
            if not announced > 0:  # also NaN
                raise ValueError(f"{name} must be a positive number, not {headers[name]!r}")
            seconds = min(seconds, announced)
    return now + seconds


class Forgetter:
    """Tells an Encoder the keys of requests given up after some of their texts were sent to it:
    one call in flight, keys arriving meanwhile go together in the next (``serving/coalesce.py``)."""

    def __init__(self, forget: Callable[[list[int]], Awaitable[object]]) -> None:
        async def call(keys: list[int]) -> list[None]:
            await forget(keys)
            return [None] * len(keys)

        self.calls: Coalescer[int, None] = Coalescer(call, max_items=4096, in_flight=1)
        self.sending: set[asyncio.Task] = set()

    def __call__(self, key: int) -> None:
        task = asyncio.ensure_future(self.calls.submit([key]))
        self.sending.add(task)
        task.add_done_callback(self.sent)

    def sent(self, task: asyncio.Task) -> None:
        self.sending.discard(task)
        if not task.cancelled() and task.exception() is not None:  # the texts are then computed, not lost
            logger.debug("could not tell the Encoder of a request given up: %r", task.exception())


class Dropped:
    """The Encoder's side: which texts are no longer wanted. Forgotten keys are kept ``keep_s`` (the
    longest a text may still arrive after its request was given up: the timeout).

    ``forget`` runs on the event loop, ``wanted`` on the inference thread: the first only replaces
    ``self.forgotten`` (pruned as a new dict), the second only reads it."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self.forgotten: dict[int, float] = {}
        self.overdue: dict[int, float] = {}  # keys already counted as past their deadline (inference thread only)

    def forget(self, keys: Iterable[int]) -> None:
        now = time.time()
        kept = {key: until for key, until in self.forgotten.items() if until > now}
        self.forgotten = kept | dict.fromkeys(keys, now + self.keep_s)

    def wanted(self, texts: Sequence[Text], group: list[int]) -> list[int]:
        """The texts of ``group`` still worth a forward pass: their client waits and their deadline is ahead.
        Each request past its deadline is counted once (``textbento_rejected_total{reason="deadline"}``)."""
        now, forgotten = time.time(), self.forgotten
        kept = []
        for index in group:
            key, due = texts[index].key, texts[index].deadline
            if due <= now:
                if key not in self.overdue:
                    self.overdue[key] = now + self.keep_s
                    telemetry.dropped("deadline")
            elif key not in forgotten:
                kept.append(index)
        if len(self.overdue) > 4096:
            self.overdue = {key: until for key, until in self.overdue.items() if until > now}
        return kept
