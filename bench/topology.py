"""Measures the two candidate topologies under the same load, one after the other in one run.

    python -m bench.topology            # writes bench/results/topology.json

one-hop: tokenization in the API service's own workers (service:TextBento), one hop to the Encoder.
two-hop: a dedicated Tokenizer service (bench.topologies.two_hop), two hops per request.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

from bench import write_result
from bench.load import batch_histogram, closed_loop
from bench.serving import serve

TOPOLOGIES = {"one-hop": "service:TextBento", "two-hop": "bench.topologies.two_hop:TwoHopTextBento"}
LOADS = [(1, 1, 300), (64, 1, 3000), (8, 32, 150)]  # (concurrency, texts per request, requests)
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "a",
    "small",
    "team",
    "serves",
    "text",
    "models",
    "fast",
]
RESULTS = Path(__file__).parent / "results"


def short_texts(count: int, seed: int = 0) -> list[str]:
    """Short mixed texts, 5 to 30 words."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) for _ in range(count)]


async def measure(url: str) -> list[dict]:
    texts = short_texts(1024)
    rows = []
    for concurrency, per_request, requests in LOADS:

        def body(i: int, per_request: int = per_request) -> dict:
            start = (i * per_request) % (len(texts) - per_request)
            return {"input": texts[start : start + per_request]}

        await closed_loop(f"{url}/v1/embeddings", body, concurrency=concurrency, requests=concurrency * 4, deadline_s=30)
        before = batch_histogram(url)
        result = await closed_loop(
            f"{url}/v1/embeddings", body, concurrency=concurrency, requests=requests, deadline_s=120, texts_per_request=per_request
        )
        batched, batches = (after - start for after, start in zip(batch_histogram(url), before))
        rows.append({"texts_per_request": per_request, **result.summary(), "calls_per_batch": round(batched / max(batches, 1), 1)})
    return rows


def main() -> None:
    report = {}
    for name, target in TOPOLOGIES.items():
        with serve(target) as server:
            report[name] = asyncio.run(measure(server.url))
        for row in report[name]:
            print(name, json.dumps(row))
    RESULTS.mkdir(exist_ok=True)
    write_result("topology.json", report, indent=2)


if __name__ == "__main__":
    main()
