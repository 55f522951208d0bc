"""BentoML's adaptive batcher, made to dispatch as soon as the model is free.

``CorkDispatcher`` holds each batch back for the *average wait it has observed*, and that
average includes the time requests spent queued behind the batch that was running. After one
burst the learned wait (hundreds of ms) sustains itself: every quiet request is held that long
and records that long again (docs/design.md, adaptive batching).

While a batch runs, that loop also polls every millisecond for its end: up to a thousand wake-ups
a second on the Encoder's event loop, taking the cores from the model's threads, and up to a tick
(more on a busy machine) lost between one batch and the next.

``dispatch_when_free`` is BentoML's dispatch loop (``CorkDispatcher.controller``) without the learned
wait, which nothing else reads, and without the polling: woken when the batch ends, a call arrives or
the oldest call comes due for shedding. Everything else BentoML does is kept: its training of its
latency model at start, requests that pile up while a batch runs going together into the next one
(up to ``max_batch_size``), and the oldest request shed with 503 when its predicted latency passes
``max_latency_ms``.

``batcher(api)`` feeds calls that arrive other than by HTTP (``serving/socket_hop.py``) to the same
batcher, as BentoML's route does: ``ServiceAppFactory.batch_infer`` of the process's service, whose
factory is kept as it creates the service's instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _bentoml_impl.server.app import ServiceAppFactory
from bentoml._internal.marshal import dispatcher

logger = logging.getLogger("textbento")

# BentoML's own dispatch loop, as it was before any patch (tests/test_compat.py checks that its optimizer
# still learns the wait the loop idles on, and that the loop still polls).
CorkDispatcher = dispatcher.CorkDispatcher
stock_controller = CorkDispatcher.controller
stock_outbound_call = CorkDispatcher.outbound_call
stock_create_instance = ServiceAppFactory.create_instance
serving: list[ServiceAppFactory] = []  # the factory of this process's service, once it creates the instance


async def dispatch_when_free(self: CorkDispatcher) -> None:
    """``CorkDispatcher.controller`` with no idle wait (``optimizer.wait``) and no polling (BentoML 1.4.40's, rewritten)."""
    try:  # BentoML's warm-up and training of o_a and o_b (a batch's time per call and fixed), as its own loop runs them
        skipped = self.optimizer.N_SKIPPED_SAMPLE
        await self.train_optimizer(skipped, skipped + 6, 1)
        for required, size in ((6, 1), (5, 2), (3, 3)):
            await self.train_optimizer(required, 1, size)
            self.optimizer.trigger_refresh()
    except Exception:
        logger.exception("BentoML's batcher could not train its latency model")
    while True:
        try:
            async with self._wake_event:
                await self._wake_event.wait_for(self._queue.__len__)
                waiting = len(self._queue)
                waited = time.time() - self._queue[0].enqueue_time
                predicted = waited + self.optimizer.o_a * waiting + self.optimizer.o_b  # the oldest's latency, were its batch to start now
                if waiting > 1 and predicted >= self.max_latency:
                    self._queue.popleft().future.cancel()  # shed: BentoML's 503
                    continue
                if self._sema.is_locked():  # a batch runs: wait for its end, a new call, or the oldest's time to run out
                    if waiting == 1 and waited >= self.max_latency:
                        self._queue.popleft().future.cancel()
                        continue
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.max_latency - (predicted if waiting > 1 else waited)):
                            await self._wake_event.wait()
                    continue
            self._sema.acquire()
            self._loop.create_task(self.outbound_call(tuple(self._get_inputs())))
        except Exception:
            logger.exception("BentoML's batcher failed to dispatch a batch")


async def outbound_call_then_wake(self: CorkDispatcher, inputs_info: tuple[Any, ...], training: bool = False) -> None:
    """``CorkDispatcher.outbound_call``, then the dispatch loop woken: the model is free."""
    try:
        await stock_outbound_call(self, inputs_info, training)
    finally:
        async with self._wake_event:
            self._wake_event.notify_all()


async def kept_create_instance(self: ServiceAppFactory, app: Any) -> None:
    serving[:] = [self]
    await stock_create_instance(self, app)


def batcher(api: str) -> Callable[[Any], Awaitable[Any]]:
    """One call of the batchable ``api`` of the service this process serves, through its batcher as an
    HTTP call goes: its argument in, its answer out. Call it from the service's ``__init__`` or later."""
    if not serving:
        raise RuntimeError("no BentoML service is being served in this process")
    return lambda argument: serving[0].batch_infer(api, (argument,), {})


def apply() -> None:
    """Every ``CorkDispatcher`` dispatches when free, and the service's factory is kept for ``batcher`` (twice
    changes nothing). Refuses to start when the installed BentoML no longer has what this replaces."""
    if not all(hasattr(dispatcher.Optimizer, name) for name in ("trigger_refresh", "N_SKIPPED_SAMPLE")) or not all(
        hasattr(CorkDispatcher, name) for name in ("controller", "outbound_call", "train_optimizer", "_wake_event", "_get_inputs")
    ):
        raise RuntimeError("BentoML's batcher changed: serving/compat/bentoml_batcher.py no longer applies; re-measure the idle wait")
    if not hasattr(ServiceAppFactory, "batch_infer"):
        raise RuntimeError("BentoML's service app has no batch_infer: serving/compat/bentoml_batcher.py no longer applies")
    CorkDispatcher.controller = dispatch_when_free
    CorkDispatcher.outbound_call = outbound_call_then_wake
    ServiceAppFactory.create_instance = kept_create_instance
