"""BentoML's adaptive batcher, made to dispatch as soon as the model is free.

``CorkDispatcher`` holds each batch back for the *average wait it has observed*, and that
average includes the time requests spent queued behind the batch that was running. After one
burst the learned wait (hundreds of ms) sustains itself: every quiet request is held that long
and records that long again (docs/design.md, adaptive batching).

Pinning the learned wait to zero keeps everything else BentoML does: requests that pile up
while a batch runs go together into the next one (up to ``max_batch_size``), and the oldest
request is shed with 503 when its predicted latency passes ``max_latency_ms``.
"""

from __future__ import annotations

from bentoml._internal.marshal import dispatcher

# BentoML's own optimizer, as it was before any patch (tests/test_compat.py checks it still learns the wait).
StockOptimizer = dispatcher.Optimizer


class DispatchWhenFree(StockOptimizer):
    """The stock optimizer (latency model for shedding) without the learned idle wait."""

    def trigger_refresh(self) -> None:
        super().trigger_refresh()
        self.wait = 0


def apply() -> None:
    """Every ``CorkDispatcher`` created from now on uses ``DispatchWhenFree`` (twice changes nothing).

    Refuses to start when the installed BentoML no longer has what this replaces."""
    if not hasattr(dispatcher, "CorkDispatcher") or not hasattr(StockOptimizer, "trigger_refresh"):
        raise RuntimeError("BentoML's batcher changed: serving/compat/bentoml_batcher.py no longer applies; re-measure the idle wait")
    dispatcher.Optimizer = DispatchWhenFree
