"""serving/compat/bentoml_batcher.py proven where it matters, served: a lone request's latency right after a burst
(its pins against the installed BentoML: tests/test_compat.py)."""

from __future__ import annotations

import asyncio
import statistics

from harness.load import closed_loop
from tests.conftest import lone_latencies, running


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
    assert after < max(2 * idle, idle + 0.05)  # the stock batcher: 181 ms after a burst (serving/compat/bentoml_batcher.py)
