"""Overload is fast and explicit: 429/503/504 with Retry-After above capacity, nothing rejected below it."""

import asyncio

import pytest
import requests

from harness.load import closed_loop
from tests.conftest import eventually_ok, running


def load(url, concurrency, requests_, deadline_s, texts=1):
    body = lambda i: {"input": [f"request {i} text {j} about serving models" for j in range(texts)]}
    return asyncio.run(closed_loop(f"{url}/v1/embeddings", body, concurrency=concurrency, requests=requests_, deadline_s=deadline_s))


def test_concurrency_256_for_10_s_all_answered(embed_url):
    """Every request answered at c=256 (``make soak`` holds mixed traffic for 10 minutes)."""
    result = load(embed_url, concurrency=256, requests_=10**6, deadline_s=10)
    print("\nc=256 for 10 s:", result.summary())
    assert result.requests > 256
    assert result.errors == 0, (result.statuses, result.sample_errors)


@pytest.fixture(scope="module")
def tight_url(embed_tag, logs):
    # One call per request, as without coalescing: the Encoder's batcher then queues enough calls
    # to shed some (merged calls left it 0-3 queued, and a run could end without any 503).
    env = {"TEXTBENTO_MAX_CONCURRENCY": "8", "TEXTBENTO_MAX_LATENCY_MS": "1", "TEXTBENTO_CALLS_IN_FLIGHT": "64"}
    with running(embed_tag, logs, "tight", **env) as server:
        yield server.url


def test_over_capacity_gets_429_or_503_with_retry_after(tight_url):
    result = load(tight_url, concurrency=64, requests_=600, deadline_s=60)
    print("\nover capacity:", result.summary())
    assert set(result.statuses) <= {200, 429, 503}, result.sample_errors
    assert result.statuses[429] > 0 and result.statuses[503] > 0 and result.statuses[200] > 0
    assert result.without_retry_after == 0
    assert requests.post(f"{tight_url}/v1/embeddings", json={"input": "after"}, timeout=30).status_code == 200


def test_overload_messages(tight_url):
    result = load(tight_url, concurrency=64, requests_=300, deadline_s=60)
    assert any('"too_many_requests"' in error or '"overloaded"' in error for error in result.sample_errors)


@pytest.fixture(scope="module")
def one_second_url(embed_tag, logs):
    with running(embed_tag, logs, "timeout", TEXTBENTO_TIMEOUT_S="1") as server:
        yield server.url


def test_request_past_the_timeout_gets_504(one_second_url):
    texts = [f"text {i} " + "long words for a slow request " * 60 for i in range(256)]
    response = requests.post(f"{one_second_url}/v1/embeddings", json={"input": texts}, timeout=30)
    assert response.status_code == 504
    assert response.json()["error"]["type"] == "timeout" and response.headers["Retry-After"] == "1"
    # The Encoder leaves out the texts past their deadline (a pass already running finishes), then serves again.
    assert eventually_ok(one_second_url, within_s=60)
