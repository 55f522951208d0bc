"""Merges the texts of concurrent requests into fewer, larger calls to the Encoder.

Every call to the Encoder has a fixed cost on both sides of the Unix socket: HTTP, pickle,
BentoML's per-call validation, tracing and batcher bookkeeping. Profiled at one text per request
and concurrency 64, that cost took as much CPU as the model itself (docs/design.md 6, 8).
An API worker therefore keeps at most a few calls in flight; requests that arrive meanwhile wait
and leave together in the next call. A lone request finds no call in flight and goes at once, so
light traffic pays nothing for it; the Encoder's adaptive batcher still merges the calls of all
workers into one forward pass.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class Overloaded(Exception):
    """Refused at once: the queue is longer than the caller's time allows."""


class ItemFailed(Exception):
    """What a call answers in place of one item's result when it computed the others but not that one:
    only the submit that carried the item fails, with ``index`` the item's place among that submit's items."""

    def __init__(self, reason: str, index: int = 0) -> None:
        super().__init__(reason)
        self.reason, self.index = reason, index

    def at(self, index: int) -> ItemFailed:
        return ItemFailed(self.reason, index)


class Coalescer(Generic[Item, Result]):
    """Sends ``call(items)`` with the items of many ``submit``s, at most ``in_flight`` calls at a time.

    A call carries at most ``max_items`` items, in arrival order; a larger submit is cut into
    pieces of ``max_items`` that queue like submits of their own. A submit whose caller gave up
    (timeout, disconnect) before its call left is dropped, so abandoned work is never sent; one
    already sent is answered and discarded, and its ``abandoned`` callback told (the callee may
    still drop it: ``serving/gone.py``). A failed call fails every submit it carried with the
    same exception; an item a call answers with an exception (``ItemFailed``: it computed the
    others, not that one) fails only the submit that carried it.

    A submit that could not be answered in the time its caller has left is refused at once
    (``Overloaded``): when the oldest piece waiting has already waited that long, a new one waits
    longer still. Taken in, it would only be dropped at its deadline after costing the queue a
    place; refused, the capacity goes to the requests that can be answered in time, and the client
    learns at once (docs/design.md 16).
    """

    def __init__(self, call: Callable[[list[Item]], Awaitable[list[Result]]], *, max_items: int, in_flight: int) -> None:
        self.call = call
        self.max_items = max_items
        self.in_flight = in_flight
        self.pending: deque[tuple[list[Item], asyncio.Future[list[Result]], float]] = deque()  # with when it came
        self.sending: set[asyncio.Task] = set()
        self.in_calls: set[asyncio.Future[list[Result]]] = set()  # of pieces in a call in flight

    async def submit(self, items: list[Item], abandoned: Callable[[], None] | None = None, within_s: float = float("inf")) -> list[Result]:
        """The results of ``items``, in order, from whichever calls carried them; ``abandoned()`` if the
        caller gives up after some of them were sent; ``Overloaded`` if the queue has stood longer than ``within_s``."""
        loop = asyncio.get_running_loop()
        while self.pending and self.pending[0][1].done():  # given up while waiting: not a queue any more
            self.pending.popleft()
        if self.pending and (waited := loop.time() - self.pending[0][2]) > within_s:
            raise Overloaded(f"the queue has stood {waited:.2f} s, longer than the {within_s:.2f} s left")
        pieces = [items[start : start + self.max_items] for start in range(0, len(items), self.max_items)]
        futures: list[asyncio.Future[list[Result]]] = [loop.create_future() for _ in pieces]
        self.pending.extend((piece, future, loop.time()) for piece, future in zip(pieces, futures))
        self.pump()
        try:
            return [result for results in await asyncio.gather(*futures) for result in results]
        except ItemFailed as failed:  # its index counts from its piece's start: from the submit's
            piece = next(
                number for number, future in enumerate(futures) if future.done() and not future.cancelled() and future.exception() is failed
            )
            raise failed.at(piece * self.max_items + failed.index) from None
        except asyncio.CancelledError:
            if abandoned and not self.in_calls.isdisjoint(futures):
                abandoned()
            raise
        finally:  # a no-op once answered; if the caller gave up, its pieces not sent leave the queue now
            for future in futures:
                future.cancel()
            if any(future.cancelled() for future in futures):
                self.pending = deque(entry for entry in self.pending if not entry[1].done())

    @property
    def queued(self) -> int:
        """Pieces waiting for a call or in one (``textbento_pending{stage="coalescer"}``)."""
        return len(self.pending) + len(self.in_calls)

    def pump(self) -> None:
        while self.pending and len(self.sending) < self.in_flight:
            batch = self.next_batch()
            if batch:
                task = asyncio.create_task(self.send(batch))
                self.sending.add(task)
                task.add_done_callback(self.sent)

    def next_batch(self) -> list[tuple[list[Item], asyncio.Future[list[Result]]]]:
        batch, size = [], 0
        while self.pending:
            items, future, _ = self.pending[0]
            if future.done():  # its caller was cancelled while it waited
                self.pending.popleft()
                continue
            if batch and size + len(items) > self.max_items:
                break
            self.pending.popleft()
            batch.append((items, future))
            self.in_calls.add(future)
            size += len(items)
        return batch

    async def send(self, batch: list[tuple[list[Item], asyncio.Future[list[Result]]]]) -> None:
        try:
            results = await self.call([item for items, _ in batch for item in items])
        except asyncio.CancelledError:  # shutting down: nobody will answer these
            for _, future in batch:
                future.cancel()
            raise
        except Exception as error:
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        finally:
            self.in_calls.difference_update(future for _, future in batch)
        start = 0
        for items, future in batch:
            if not future.done():
                answer(future, results[start : start + len(items)])
            start += len(items)

    def sent(self, task: asyncio.Task) -> None:
        self.sending.discard(task)
        if not task.cancelled():
            self.pump()


def answer(future: asyncio.Future[list[Result]], results: list[Result]) -> None:
    """A piece's results, or the first exception a call answered in place of one of its items
    (an ``ItemFailed`` told its item's place in the piece)."""
    failed = next(((index, result) for index, result in enumerate(results) if isinstance(result, BaseException)), None)
    if failed is None:
        future.set_result(results)
    else:
        index, error = failed
        future.set_exception(error.at(index) if isinstance(error, ItemFailed) else error)
