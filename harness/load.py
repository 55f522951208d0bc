"""Closed-loop HTTP load: ``concurrency`` clients, each sending its next request when the last one answers.

Bounded by a request count and a deadline, whichever comes first. Uses aiohttp (a dependency of
BentoML already) because the load generator shares the machine's cores with the server.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np


@dataclass
class LoadResult:
    """What one load run saw: per-request latencies (seconds) and status counts."""

    concurrency: int
    elapsed_s: float
    latencies_s: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    texts: int = 0
    # 429/503/504 answers must say when to come back.
    without_retry_after: int = 0
    sample_errors: list[str] = field(default_factory=list)
    # (sent at, seconds from the run's start; latency, seconds; status or error name; Retry-After sent), when asked for.
    timeline: list[tuple[float, float, int | str, bool]] | None = None

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())

    @property
    def errors(self) -> int:
        return self.requests - self.statuses.get(200, 0)

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q) * 1000) if self.latencies_s else float("nan")

    def summary(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "requests": self.requests,
            "errors": self.errors,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items(), key=str)},
            "requests_per_s": round(self.requests / self.elapsed_s, 1),
            "texts_per_s": round(self.texts / self.elapsed_s, 1),
            "p50_ms": round(self.percentile_ms(50), 2),
            "p95_ms": round(self.percentile_ms(95), 2),
            "p99_ms": round(self.percentile_ms(99), 2),
        }


async def closed_loop(
    url: str,
    make_body: Callable[[int], dict[str, Any]],
    *,
    concurrency: int,
    requests: int,
    deadline_s: float,
    texts_per_request: int = 1,
    timeline: bool = False,
    timeout_s: float | None = None,
) -> LoadResult:
    """POST ``make_body(i)`` to ``url`` for i in range(requests), ``concurrency`` at a time
    (each request given up after ``timeout_s``: by default the deadline + 60 s)."""
    result = LoadResult(concurrency=concurrency, elapsed_s=0.0, timeline=[] if timeline else None)
    counter = iter(range(requests))
    stop_at = time.perf_counter() + deadline_s
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=timeout_s or max(deadline_s, 1) + 60)

    async def client(session: aiohttp.ClientSession) -> None:
        for index in counter:
            if time.perf_counter() > stop_at:
                return
            started, retry_after = time.perf_counter(), False
            try:
                async with session.post(url, json=make_body(index)) as response:
                    body = await response.read()
                    status, retry_after = response.status, "Retry-After" in response.headers
                    if status in (429, 503, 504) and not retry_after:
                        result.without_retry_after += 1
            except (TimeoutError, aiohttp.ClientError) as error:
                status, body = type(error).__name__, b""
            result.latencies_s.append(time.perf_counter() - started)
            if result.timeline is not None:
                result.timeline.append((started - run_started, result.latencies_s[-1], status, retry_after))
            result.statuses[status] += 1
            if status == 200:
                result.texts += texts_per_request
            elif len(result.sample_errors) < 5:
                result.sample_errors.append(f"{status}: {body[:200]!r}")

    run_started = time.perf_counter()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    result.elapsed_s = time.perf_counter() - run_started
    return result


def batch_histogram(base_url: str) -> tuple[float, float]:
    """(calls, batches) the Encoder's adaptive batcher has dispatched so far, from /metrics.

    BentoML's histogram observes how many calls each batch merged. A call carries the texts an API
    worker merged from its concurrent requests (serving/coalesce.py), so these are calls, not
    texts: ``textbento_batch_texts`` counts texts per forward pass.
    """
    import re
    import urllib.request

    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
        text = response.read().decode()

    def total(suffix: str) -> float:
        pattern = rf'adaptive_batch_size_{suffix}\{{[^}}]*method_name="encode"[^}}]*\}} (\S+)'
        return sum(float(value) for value in re.findall(pattern, text))

    return total("sum"), total("count")
