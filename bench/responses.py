"""What writing an embeddings answer to JSON costs, in process: three ways to the same JSON.

    python -m bench.responses [--reps 2000]    # → bench/results/responses.json

For 1 and 32 embeddings of 384 float32s (all-MiniLM-L6-v2's), the best of 5 runs of ``--reps`` each:
- through the route's response model, as FastAPI would answer a returned dict (validated, then written);
- ``pydantic_core.to_json`` of the rows as Python floats (``tolist``), float64's 17 digits a number;
- ``api.responses.json_response`` (served): orjson writes the float32 arrays with the fewest digits that read back
  as the same float32s.

    python -m bench.responses --sparse    # → bench/results/responses-sparse.json

For 32 SPLADE vectors of BERT's 30,522 ids, 1% non-zero (a trained SPLADE's share) and 96% (the random-weight test
model's), TEI's ``[{"index", "value"}, ...]`` per text: as a dict per weight with its numpy scalar, or as
``api.responses.sparse_json`` writes it (served); the same bytes, the time (best of 5) and the Python memory at peak
(``tracemalloc``) of writing one answer.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
import pydantic_core

from api.responses import json_response, sparse_json
from api.types import EmbeddingsResponse
from harness.results import write_result

DIMENSIONS = 384


def answer(rows) -> dict:
    data = [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)]
    return {"object": "list", "data": data, "model": "all-MiniLM-L6-v2", "usage": {"prompt_tokens": 9, "total_tokens": 9}}


WAYS: dict[str, Callable[[np.ndarray], bytes]] = {
    "response model": lambda rows: EmbeddingsResponse.model_validate(answer(rows.tolist())).model_dump_json().encode(),
    "pydantic_core, Python floats": lambda rows: pydantic_core.to_json(answer(rows.tolist())),
    "json_response, float32 arrays (served)": lambda rows: json_response(answer(rows)).body,
}


def best_us(write: Callable[[np.ndarray], bytes], rows: np.ndarray, reps: int) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(reps):
            write(rows)
        best = min(best, (time.perf_counter() - started) / reps)
    return round(best * 1e6, 1)


VOCABULARY = 30_522
SPARSE_WAYS: dict[str, Callable[[np.ndarray], bytes]] = {
    "a dict per weight": lambda rows: (
        json_response([[{"index": i, "value": row[i]} for i in np.flatnonzero(row).tolist()] for row in rows]).body
    ),
    "sparse_json (served)": lambda rows: json_response([sparse_json(row) for row in rows]).body,
}


def peak_mib(write: Callable[[np.ndarray], bytes], rows: np.ndarray) -> float:
    tracemalloc.start()
    write(rows)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return round(peak / 2**20, 1)


def sparse() -> None:
    rng = np.random.default_rng(0)
    results = {}
    for share in (0.01, 0.96):
        rows = (rng.random((32, VOCABULARY), dtype=np.float32) * 3) * (rng.random((32, VOCABULARY)) < share)
        written = {way: write(rows) for way, write in SPARSE_WAYS.items()}
        assert len(set(written.values())) == 1, "the ways wrote different JSON"
        results[f"32 texts, {share:.0%} non-zero"] = {
            way: {"us": best_us(write, rows, 3), "peak_python_mib": peak_mib(write, rows), "bytes": len(written[way])}
            for way, write in SPARSE_WAYS.items()
        }
    print(results)
    write_result("responses-sparse.json", {"vocabulary": VOCABULARY, "answers": results})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--sparse", action="store_true", help="SPLADE answers instead: → bench/results/responses-sparse.json")
    args = parser.parse_args()
    if args.sparse:
        return sparse()
    rng = np.random.default_rng(0)
    rows = {}
    for count in (1, 32):
        vectors = rng.standard_normal((count, DIMENSIONS)).astype(np.float32)
        rows[count] = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    results = {
        f"{count} embedding(s)": {
            way: {"us": best_us(write, vectors, max(1, args.reps // count)), "bytes": len(write(vectors))} for way, write in WAYS.items()
        }
        for count, vectors in rows.items()
    }
    print(results)
    write_result("responses.json", {"dimensions": DIMENSIONS, "reps": args.reps, "answers": results})


if __name__ == "__main__":
    main()
