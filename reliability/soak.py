"""Soak: mixed traffic for a while against a real server, sampling the RSS of every process.

    python -m reliability.soak [--minutes 10]     # writes bench/results/soak.json; exit 1 on failure

Passes when every request is answered 200 and total RSS grows less than 10% between the end of
the warm-up (first 20% of the run) and the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import threading
import time

from harness.load import closed_loop
from harness.results import RESULTS, write_result
from harness.serving import serve
from harness.texts import short_texts

# Each task's route, and its request for one text or a list of them.
ROUTES = {"embed": "/v1/embeddings", "classify": "/v1/classify", "rerank": "/v1/rerank", "sparse": "/embed_sparse"}
ASKED = {
    "embed": lambda texts: {"input": texts, **({"encoding_format": "base64"} if isinstance(texts, list) else {})},
    "classify": lambda texts: {"inputs": texts},
    "rerank": lambda texts: {"query": "which of these is relevant", "documents": texts if isinstance(texts, list) else [texts]},
    "sparse": lambda texts: {"inputs": texts},
}


def mixed_body(texts: list[str], task: str = "embed", model: str | None = None):
    """Requests of one short text (60%), 32 texts (30%) or one text past max_length (10%, truncated),
    in the shape of ``task``'s route (``ROUTES``), naming ``model`` when given."""
    rng = random.Random(1)
    named = {"model": model} if model else {}

    def body(i: int) -> dict:
        kind = rng.random()
        chosen = rng.choice(texts) if kind < 0.6 else rng.sample(texts, 32) if kind < 0.9 else " ".join(rng.sample(texts, 40))
        return {**named, **ASKED[task](chosen)}

    return body


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    args = parser.parse_args()
    duration = args.minutes * 60
    samples: list[tuple[float, float]] = []
    with serve() as server:
        stop = threading.Event()

        def sample() -> None:
            started = time.monotonic()
            while not stop.wait(5):
                samples.append((round(time.monotonic() - started, 1), round(server.rss_mib(), 1)))

        sampler = threading.Thread(target=sample)
        sampler.start()
        result = asyncio.run(
            closed_loop(f"{server.url}/v1/embeddings", mixed_body(short_texts(2048)), concurrency=32, requests=10**9, deadline_s=duration)
        )
        stop.set()
        sampler.join()
    warm = next(rss for t, rss in samples if t >= duration * 0.2)
    growth = samples[-1][1] / warm - 1
    report = {
        "minutes": args.minutes,
        **result.summary(),
        "rss_mib_after_warmup": warm,
        "rss_mib_end": samples[-1][1],
        "rss_growth": round(growth, 4),
        "rss_samples": samples,
    }
    RESULTS.mkdir(exist_ok=True)
    write_result("soak.json", report, indent=2)
    print(json.dumps({k: v for k, v in report.items() if k != "rss_samples"}))
    return 0 if result.errors == 0 and growth < 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
