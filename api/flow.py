"""Who waits, who is refused and who is dropped: a request's budget, from its arrival to its answer.

A request's budget is made here, once (``Budget.start``): its deadline (now + the least of
``TEXTBENTO_TIMEOUT_S`` and the timeout its client or proxy announced, read by
``api.middleware.CancelWhenGone``) and the key under which the Encoder can forget its texts. The
pipeline passes it down explicitly; the texts carry its key and deadline to the Encoder
(``serving/wire.py``), which leaves out those of requests given up or overdue (``serving/gone.py``).

Every refusal of a request that reached a route is built here (those of the Encoder's own errors, in
``api/errors.py``): 429 past a model's share of the worker, 503 where the queue could not answer in
time, the Encoder is unreachable or the worker holds too many request bodies, 504 past the deadline.
docs/operations.md maps each to its setting and metric.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from serving.coalesce import Coalescer, Overloaded
from serving.gone import deadline, new_key
from serving.settings import settings

from .errors import APIError

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(frozen=True)
class Budget:
    """One request's time and identity: when it came, when it is due, and its key at the Encoder."""

    started: float
    due: float
    key: int = field(default_factory=new_key)

    @classmethod
    def start(cls, started: float | None = None) -> Budget:
        started = time.time() if started is None else started
        return cls(started, deadline.get() or started + settings.timeout_s)

    def left_s(self) -> float:
        return self.due - time.time()

    def overdue(self) -> APIError:
        return APIError(504, "timeout", f"not answered within its deadline ({self.due - self.started:.3g} s)", retry_after=1)


@dataclass
class Admission:
    """One model's share of an API worker: a slow or restarting model fills its own share, not the others'."""

    model: str
    limit: int
    in_flight: int = 0

    @contextmanager
    def __call__(self) -> Iterator[None]:
        """One request in flight; 429 past ``limit``."""
        if self.in_flight >= self.limit:
            message = f"over {self.limit} requests in flight for model {self.model!r}; retry shortly"
            raise APIError(429, "too_many_requests", message, retry_after=1)
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1


@asynccontextmanager
async def admitted(admission: Admission, budget: Budget) -> AsyncIterator[None]:
    """A request's turn with a model: admitted (429 past its share), then 504 at its deadline."""
    if budget.due <= budget.started:
        raise budget.overdue()
    try:
        with admission():
            async with asyncio.timeout(budget.left_s()):
                yield
    except TimeoutError:
        raise budget.overdue() from None


async def sent(calls: Coalescer[Item, Result], items: list[Item], budget: Budget, forget: Callable[[int], None]) -> list[Result]:
    """``items`` through a model's shared calls to its Encoder: 503 at once where the queue stands longer than
    the time left (it would only time out in it: ``serving/coalesce.py``); ``forget(key)`` if given up once sent."""
    try:
        return await calls.submit(items, abandoned=lambda: forget(budget.key), within_s=budget.left_s())
    except Overloaded as refused:
        raise APIError(503, "overloaded", f"{refused}: retry shortly", retry_after=1) from None


def over_body_budget(budget_bytes: int) -> APIError:
    """A body that would take the bytes of request bodies an API worker holds past its budget (``api.middleware.BodySizeLimit``)."""
    message = f"the request bodies this worker holds would pass {budget_bytes} bytes; retry shortly"
    return APIError(503, "body_budget", message, retry_after=1)


def unavailable(model: str) -> APIError:
    """The Encoder has not answered yet (loading, or restarting after a crash)."""
    return APIError(503, "runner_unavailable", f"model {model!r} is starting; retry shortly", retry_after=1)


def unhealthy(models: list[str]) -> APIError:
    """TEI's health check failed: these models' Encoders do not answer now."""
    return APIError(503, "unhealthy", f"the Encoder of {', '.join(map(repr, models))} does not answer", retry_after=1)
