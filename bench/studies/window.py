"""A bulk window through the model: every pass cut across the streams and joined, or whole passes, one per stream.

    python -m bench.studies.window    # all-MiniLM-L6-v2, 8,192 short texts → bench/results/window.json

``bulk.embed`` sorts a window of texts by length and cuts it into passes under the token budget.
On the CPU the int8 graph runs in streams (``models/backends/onnx_backend.Streams``), and the
Encoder cuts each pass across them (``run_batch``): the streams wait for each other at the end of
every pass. A job that waits for the whole window can give each stream whole passes of its share of
the budget instead (``models.inference.run_window``). In process, the same window both ways at
each budget, rounds in a shuffled order; median and best texts/s.
"""

from __future__ import annotations

import random
import statistics
import time

import bentoml

from bench import write_result
from bench.ceiling import bench_tag
from harness.texts import short_texts
from models.backends import load_backend
from models.inference import run_batch, run_window
from models.spec import ModelSpec
from models.tokenization import TextTokenizer
from serving.settings import settings

TEXTS, BUDGETS, ROUNDS = 8192, (1024, 2048, 4096), 6


def main() -> None:
    stored = bentoml.models.get(bench_tag())
    spec = ModelSpec.of(stored)
    ids = [e.ids for e in TextTokenizer(stored.path, spec.max_length).encode(short_texts(TEXTS, seed=7))]
    backend = load_backend("onnx-int8", stored.path, spec, settings.runner_threads)
    ways = {f"{run.__name__}, budget {budget}": (run, budget) for run in (run_batch, run_window) for budget in BUDGETS}
    rates: dict[str, list[float]] = {name: [] for name in ways}
    for run, budget in ways.values():
        run(backend, ids[:512], spec.pad_id, budget)  # warm-up at these shapes
    for round_ in range(ROUNDS):
        for name in random.Random(round_).sample(list(ways), len(ways)):
            run, budget = ways[name]
            started = time.perf_counter()
            run(backend, ids, spec.pad_id, budget)
            rates[name].append(len(ids) / (time.perf_counter() - started))
    report = {
        "model": str(stored.tag),
        "backend": f"{backend.name} {backend.precision}, {backend.passes_at_once} streams",
        "texts": f"{TEXTS} short texts (5-30 words), seed 7",
        "texts_per_s": {name: {"median": round(statistics.median(r), 1), "best": round(max(r), 1)} for name, r in rates.items()},
    }
    print(report["texts_per_s"])
    print(write_result("window.json", report))


if __name__ == "__main__":
    main()
