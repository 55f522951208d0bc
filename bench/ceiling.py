"""The in-process ceiling: sentences/s of one backend with tokenization, without HTTP or the batcher.

    python -m bench.ceiling            # torch, onnx, onnx-int8 on all-MiniLM-L6-v2 → bench/results/ceiling.json

Each batch of short texts (5-30 words) is tokenized (``TextTokenizer``) and run through
``run_batch``, as the Encoder does. The main command imports the embedded all-MiniLM-L6-v2 with
its ONNX graphs once (as ``bench-minilm-onnx``), then measures the backends in turns, several
rounds, keeping each point's best round: other processes on a shared machine only ever slow a
round down.
"""

from __future__ import annotations

import json
import os
import time
from typing import Sequence

import bentoml

from bench.topology import RESULTS, short_texts
from models.backends import load_backend
from models.inference import run_batch
from models.settings import settings
from models.spec import ModelSpec
from models.tokenization import TextTokenizer

BACKENDS = ("torch", "onnx", "onnx-int8")
BATCH_SIZES = (1, 8, 32, 64)
BENCH_MODEL = "bench-minilm-onnx"


def ceiling(backend_name: str, tag: str, batch_sizes: Sequence[int], seconds: float = 3.0) -> tuple[str, list[dict]]:
    """The backend ``auto`` resolved to, and ``{"batch_size", "sentences_per_s"}`` per batch size, ``seconds`` each.

    Loads and runs the backend on the calling thread: torch's OpenMP pool belongs to the thread
    that loaded the model (docs/design.md, section 2).
    """
    stored = bentoml.models.get(tag)
    spec = ModelSpec.of(stored)
    tokenizer = TextTokenizer(stored.path, spec.max_length)
    backend = load_backend(backend_name, stored.path, spec, settings.runner_threads)
    texts = short_texts(4096)

    def encode(start: int, size: int) -> None:
        chunk = [texts[(start + i) % len(texts)] for i in range(size)]
        run_batch(backend, [e.ids for e in tokenizer.encode(chunk)], spec.pad_id, settings.token_budget)

    rows = []
    for size in batch_sizes:
        encode(0, size)  # warm-up: the first pass at a new size allocates
        done, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            encode(done, size)
            done += size
        rows.append({"batch_size": size, "sentences_per_s": round(done / elapsed, 1)})
    return backend.name, rows


def bench_tag() -> str:
    """The benchmark model, imported with its ONNX graphs on first use."""
    from models.store import default_model_dir, import_model

    try:
        return str(bentoml.models.get(f"{BENCH_MODEL}:latest").tag)
    except bentoml.exceptions.NotFound:
        source = "sentence-transformers/all-MiniLM-L6-v2"
        return str(import_model(default_model_dir(), name=BENCH_MODEL, source=source))


def main(rounds: int = 3) -> None:
    tag = bench_tag()
    best: dict[str, dict[int, float]] = {name: {} for name in BACKENDS}
    load = [os.getloadavg()[0]]
    for _ in range(rounds):
        for name in BACKENDS:
            for row in ceiling(name, tag, BATCH_SIZES)[1]:
                best[name][row["batch_size"]] = max(best[name].get(row["batch_size"], 0.0), row["sentences_per_s"])
        load.append(os.getloadavg()[0])
    results = {
        name: [{"batch_size": size, "sentences_per_s": rate} for size, rate in by_size.items()] for name, by_size in best.items()
    }
    report = {
        "model": tag,
        "texts": "short, 5-30 words",
        "threads": settings.runner_threads,
        "rounds": rounds,
        "load_average_1m": load,  # other processes on the machine, sampled before and after each round
        "results": results,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ceiling.json").write_text(json.dumps(report, indent=2) + "\n")
    for name, rows in results.items():
        print(name, "  ".join(f"bs{row['batch_size']}: {row['sentences_per_s']:.0f}/s" for row in rows))


if __name__ == "__main__":
    main()
