"""serving/dispatch.py patches BentoML's private batcher: pinned against the installed BentoML, and
proven where it matters, a lone request's latency right after a burst."""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

from bentoml._internal.marshal import dispatcher

from harness.load import closed_loop
from serving.dispatch import DispatchWhenFree, dispatch_when_free
from tests.conftest import lone_latencies, running


def test_the_patched_batcher_exists_and_uses_the_fix():
    """Fails loudly if a BentoML upgrade moved what the patch replaces (it would silently do nothing)."""
    assert hasattr(dispatcher, "CorkDispatcher") and hasattr(dispatcher, "Optimizer")
    assert hasattr(dispatcher.Optimizer, "trigger_refresh") and hasattr(dispatcher.Optimizer, "log_outbound")
    dispatch_when_free()
    batcher = dispatcher.CorkDispatcher(60_000, 64, fallback=lambda: None)
    assert isinstance(batcher.optimizer, DispatchWhenFree)
    assert "self.optimizer.wait" in Path(dispatcher.__file__).read_text()  # what the dispatch loop idles on


def test_the_learned_wait_stays_zero_after_long_waits():
    optimizer = DispatchWhenFree(max_latency=60.0)
    for _ in range(20):  # a burst: every call waited 200 ms behind the batch before it
        optimizer.o_stat.append((8, 0.05, 0.2))
    optimizer.trigger_refresh()
    (stock,) = DispatchWhenFree.__bases__  # BentoML's own optimizer
    learned = stock(60.0)
    learned.o_stat.extend(optimizer.o_stat)
    learned.trigger_refresh()
    assert optimizer.wait == 0 and learned.wait > 0.1  # the stock optimizer would idle 200 ms per batch


def test_after_a_burst_a_lone_request_is_as_fast_as_before(embed_tag, logs):
    """A call per request (``TEXTBENTO_CALLS_IN_FLIGHT=64``: no merging in the API workers), so that
    a burst queues many calls at the Encoder, as it did before serving/coalesce.py and still can
    with many workers: the stock batcher then learns the burst's queueing as its idle wait."""
    with running(embed_tag, logs, "dispatch", TEXTBENTO_CALLS_IN_FLIGHT="64") as server:
        idle = statistics.median(asyncio.run(lone_latencies(server.url, 20)))
        body = lambda i: {"input": [f"burst {i} {j}" for j in range(16)]}
        asyncio.run(closed_loop(f"{server.url}/v1/embeddings", body, concurrency=64, requests=640, deadline_s=60))
        after = statistics.median(asyncio.run(lone_latencies(server.url, 20)))
    print(f"\nlone request p50: {idle * 1000:.1f} ms idle, {after * 1000:.1f} ms after a burst")
    assert after < max(2 * idle, idle + 0.05)  # the stock batcher: 181 ms after a burst (serving/dispatch.py)
