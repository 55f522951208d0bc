"""BentoML's adaptive batcher, made to dispatch as soon as the model is free.

``CorkDispatcher`` holds each batch back for the *average wait it has observed*, and that
average includes the time requests spent queued behind the batch that was running. After one
burst the learned wait (hundreds of ms) sustains itself: every quiet request is held that long
and records that long again (docs/design.md, adaptive batching).

Pinning the learned wait to zero keeps everything else BentoML does: requests that pile up
while a batch runs go together into the next one (up to ``max_batch_size``), and the oldest
request is shed with 503 when its predicted latency passes ``max_latency_ms``.

``batcher(api)`` feeds calls that arrive other than by HTTP (``serving/socket_hop.py``) to the same
batcher, as BentoML's route does: ``ServiceAppFactory.batch_infer`` of the process's service, whose
factory is kept as it creates the service's instance.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from _bentoml_impl.server.app import ServiceAppFactory
from bentoml._internal.marshal import dispatcher

# BentoML's own optimizer, as it was before any patch (tests/test_compat.py checks it still learns the wait).
StockOptimizer = dispatcher.Optimizer
stock_create_instance = ServiceAppFactory.create_instance
serving: list[ServiceAppFactory] = []  # the factory of this process's service, once it creates the instance


class DispatchWhenFree(StockOptimizer):
    """The stock optimizer (latency model for shedding) without the learned idle wait."""

    def trigger_refresh(self) -> None:
        super().trigger_refresh()
        self.wait = 0


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
    """Every ``CorkDispatcher`` created from now on uses ``DispatchWhenFree``, and the service's factory
    is kept for ``batcher`` (twice changes nothing). Refuses to start when the installed BentoML no
    longer has what this replaces."""
    if not hasattr(dispatcher, "CorkDispatcher") or not hasattr(StockOptimizer, "trigger_refresh"):
        raise RuntimeError("BentoML's batcher changed: serving/compat/bentoml_batcher.py no longer applies; re-measure the idle wait")
    if not hasattr(ServiceAppFactory, "batch_infer"):
        raise RuntimeError("BentoML's service app has no batch_infer: serving/compat/bentoml_batcher.py no longer applies")
    dispatcher.Optimizer = DispatchWhenFree
    ServiceAppFactory.create_instance = kept_create_instance
