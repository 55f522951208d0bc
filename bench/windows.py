"""Does sorting across the Encoder's calls pay? Its way with a batch, against wider windows, in process.

    python -m bench.windows      # → bench/results/windows.json (~5 min)
    python -m bench.windows --output windows-avx2-zen1.json     # another CPU class's run: its own file

The Encoder sorts and cuts each batch it is given (``run_batch``); a batch holds the calls that arrived
while the previous one ran. A wider window sorts more texts together, and bulk jobs also run whole
passes one per stream (``run_window``). On the served graph, 2,048 pre-tokenized texts, short (5-30
words) and mixed (3-60 words), each way one pass over them per round, the ways in turns, medians of
the rounds (this machine's speed drifts within minutes):

- ``batches of N``: runs of N texts in arrival order through ``run_batch``, as the Encoder does with a batch of N;
- ``window of N``: the same through ``run_window``, as ``bulk.embed`` does;
- ``sorted-32``: the whole stream sorted by length, then passes of 32 (the ceiling ``make bench-peers`` reports).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import bentoml

from bench.ceiling import bench_tag, loaded, rate
from harness.results import write_result
from harness.texts import mixed_texts, short_texts
from models.inference import run_batch, run_window
from models.tokenization import TextTokenizer
from serving.settings import settings

TEXTS, ROUNDS, SIZES = 2048, 5, (32, 64, 256)


def runs_rate(run: Callable, backend, spec, ids: list, size: int) -> float:
    """Texts/s of ``run`` over ``ids`` in runs of ``size`` in arrival order."""
    groups = [ids[start : start + size] for start in range(0, len(ids), size)]
    run(backend, groups[0], spec.pad_id, settings.token_budget)  # warm-up
    started = time.perf_counter()
    for group in groups:
        run(backend, group, spec.pad_id, settings.token_budget)
    return len(ids) / (time.perf_counter() - started)


def ways(backend, spec, ids: list) -> dict[str, Callable[[], float]]:
    """Each way of batching ``ids``, as a measurement of its texts/s."""
    every: dict[str, Callable[[], float]] = {"sorted-32": lambda: rate(backend, spec, ids, "sorted-32")}
    for size in SIZES:
        every[f"batches of {size}"] = lambda size=size: runs_rate(run_batch, backend, spec, ids, size)
        every[f"window of {size}"] = lambda size=size: runs_rate(run_window, backend, spec, ids, size)
    return every


def main(output: str = "windows.json") -> None:
    tag = bench_tag()
    backend, spec, _ = loaded("auto", tag)
    tokenizer = TextTokenizer(bentoml.models.get(tag).path, spec.max_length)
    report: dict = {"model": tag, "backend": f"{backend.name} {backend.precision}", "rounds": ROUNDS, "texts": TEXTS, "texts_per_s": {}}
    for kind, texts in (("short, 5-30 words", short_texts(TEXTS, seed=3)), ("mixed, 3-60 words", mixed_texts(TEXTS, seed=3))):
        measures = ways(backend, spec, [e.ids for e in tokenizer.encode(texts)])
        rounds: dict[str, list[float]] = {way: [] for way in measures}
        for _ in range(ROUNDS):
            for way, measure in measures.items():
                rounds[way].append(measure())
        report["texts_per_s"][kind] = {
            way: {"median": round(statistics.median(r), 1), "best": round(max(r), 1)} for way, r in rounds.items()
        }
        print(kind, {way: row["median"] for way, row in report["texts_per_s"][kind].items()}, flush=True)
    write_result(output, report, indent=2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="windows.json", help="the result file's name in bench/results/")
    main(parser.parse_args().output)
