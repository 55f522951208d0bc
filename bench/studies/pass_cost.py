"""What a forward pass costs beyond its padded tokens, and the cut of a batch into passes it asks for:
the fixed cost per pass the cut counts, and the token budget (the largest pass).

    python -m bench.studies.pass_cost    # all-MiniLM-L6-v2 and DistilBERT-66M → bench/results/pass-cost.json

``models.batching.plan_sub_batches`` cuts each collected batch where padded tokens plus a fixed
cost per pass (``PASS_COST_TOKENS``) are least. Per model, in process, served as the Encoder runs
it (the int8 graph in streams, ``models/backends/onnx_backend.Streams``):

- ``fit``: passes of 1-64 rows of 8-48 tokens, each timed (median of 5), and ``time = a × padded
  tokens + b`` fitted by least squares: ``b / a`` is the fixed cost in tokens;
- ``cut``: the same stream of short texts (5-30 words) in runs of 64 as they come, cut with each
  pass cost (the token budget the served one), against the whole stream sorted by length and cut
  into passes of 64 (the least padding any batcher could reach). Best of 5 rounds taken in turns;
- ``budget``: the same stream through ``run_batch`` at each token budget (``BUDGETS``), in runs of 64
  as the Encoder cuts a batch, and sorted as a whole as ``bulk.embed`` cuts a window. Best of 5 rounds.
"""

from __future__ import annotations

import statistics
import time

import bentoml
import numpy as np

from bench import write_result
from harness.texts import short_texts
from models.backends import load_backend
from models.batching import pad, plan_sub_batches
from models.inference import run_batch
from models.spec import ModelSpec
from models.tokenization import TextTokenizer
from serving.settings import settings

MODELS = ("bench-minilm", "bench-distilbert")  # imported by `make bench` (bench.run)
PASS_COSTS = (16, 32, 48, 64, 96, 128)
BUDGETS = (512, 768, 1024, 1536, 2048, 4096)
ROUNDS = 5


def fit(backend, pad_id: int) -> dict[str, float]:
    """The fixed cost of a pass, in ms and in padded tokens, from passes of several shapes."""
    shapes = [(rows, width) for rows in (1, 2, 4, 8, 16, 32, 64) for width in (8, 16, 32, 48) if rows * width <= 2048]
    tokens, seconds = [], []
    for rows, width in shapes:
        ids, mask = pad([np.full(width, 1000, dtype=np.int32)] * rows, pad_id)
        backend.forward(ids, mask)  # warm-up at this shape
        times = []
        for _ in range(5):
            started = time.perf_counter()
            backend.forward(ids, mask)
            times.append(time.perf_counter() - started)
        tokens.append(rows * width)
        seconds.append(statistics.median(times))
    (per_token, per_pass), *_ = np.linalg.lstsq(np.array([[t, 1.0] for t in tokens]), np.array(seconds), rcond=None)
    return {
        "ms_per_token": round(per_token * 1000, 5),
        "ms_per_pass": round(per_pass * 1000, 3),
        "pass_cost_tokens": round(per_pass / per_token, 1),
    }


def cuts(backend, pad_id: int, ids: list[np.ndarray]) -> dict[str, float]:
    """Texts/s of the stream cut with each pass cost, and sorted as a whole (best of ``ROUNDS``)."""

    def served(cost: int) -> None:
        for start in range(0, len(ids), 64):
            run = ids[start : start + 64]
            for group in plan_sub_batches([len(one) for one in run], settings.token_budget, cost):
                backend.forward(*pad([run[index] for index in group], pad_id))

    def whole_stream_sorted() -> None:
        ordered = sorted(ids, key=len)
        for start in range(0, len(ordered), 64):
            backend.forward(*pad(ordered[start : start + 64], pad_id))

    ways = {f"runs of 64, pass cost {cost}": lambda cost=cost: served(cost) for cost in PASS_COSTS}
    ways["whole stream sorted, passes of 64"] = whole_stream_sorted
    best = dict.fromkeys(ways, 0.0)
    for _ in range(ROUNDS):
        for name, run in ways.items():
            started = time.perf_counter()
            run()
            best[name] = max(best[name], round(len(ids) / (time.perf_counter() - started), 1))
    return best


def budgets(backend, pad_id: int, ids: list[np.ndarray]) -> dict[str, dict[int, float]]:
    """Texts/s of the stream through ``run_batch`` at each budget: in runs of 64, and sorted as a whole (best of ``ROUNDS``)."""

    def runs_of_64(budget: int) -> None:
        for start in range(0, len(ids), 64):
            run_batch(backend, ids[start : start + 64], pad_id, budget)

    ways = {"runs of 64": runs_of_64, "whole stream": lambda budget: run_batch(backend, ids, pad_id, budget)}
    best: dict[str, dict[int, float]] = {name: dict.fromkeys(BUDGETS, 0.0) for name in ways}
    for _ in range(ROUNDS):
        for name, run in ways.items():
            for budget in BUDGETS:
                started = time.perf_counter()
                run(budget)
                best[name][budget] = max(best[name][budget], round(len(ids) / (time.perf_counter() - started), 1))
    return best


def main() -> None:
    report = {"token_budget": settings.token_budget, "threads": settings.runner_threads, "models": {}}
    for name in MODELS:
        stored = bentoml.models.get(f"{name}:latest")
        spec = ModelSpec.of(stored)
        ids = [e.ids for e in TextTokenizer(stored.path, spec.max_length).encode(short_texts(2048 if name == "bench-minilm" else 768))]
        backend = load_backend("onnx-int8", stored.path, spec, settings.runner_threads)
        report["models"][str(stored.tag)] = {
            "backend": f"{backend.name} {backend.precision}",
            "fit": fit(backend, spec.pad_id),
            "texts_per_s": cuts(backend, spec.pad_id, ids),
            "texts_per_s_by_token_budget": budgets(backend, spec.pad_id, ids),
        }
        print(name, report["models"][str(stored.tag)], flush=True)
    print(write_result("pass-cost.json", report))


if __name__ == "__main__":
    main()
