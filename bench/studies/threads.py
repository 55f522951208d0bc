"""The runner's CPU threads: wall time and CPU of one forward pass, by pass size, on this machine.

    python -m bench.studies.threads [TAG]   # → bench/results/threads.json

The served int8 graph of a stored embedder (default: the benchmark model) runs length-sorted
passes of 1 to 64 short texts three ways, in turns, 3 rounds; each figure is the best round, per
pass: on one single-threaded session; on one session with an intra-op thread per core; and as the
backend serves it, in streams (a slice of the pass per core, each on a single-threaded session,
``models.backends.onnx_backend.Streams``). CPU that a way spends for little wall time is taken
from the API workers, which share the cores (docs/design.md 9).
"""

from __future__ import annotations

import copy
import os
import sys
import time

import bentoml

from bench import write_result
from harness.texts import short_texts
from models.backends import load_backend
from models.backends.onnx_backend import Streams
from models.inference import run_batch
from models.spec import ModelSpec
from models.tokenization import TextTokenizer

SIZES = (1, 2, 4, 8, 16, 32, 64)
ROUNDS = 3


def timed(backend, spec: ModelSpec, ids: list, size: int) -> tuple[float, float]:
    """(wall ms, CPU ms of this process) per pass of ``size`` texts, over enough passes to count."""
    passes = max(8, 256 // size)
    wall, cpu = time.perf_counter(), time.process_time()
    for index in range(passes):
        run_batch(backend, [ids[(index * size + j) % len(ids)] for j in range(size)], spec.pad_id, 10**6)
    return (time.perf_counter() - wall) * 1000 / passes, (time.process_time() - cpu) * 1000 / passes


def main() -> None:
    from bench.ceiling import bench_tag

    stored = bentoml.models.get(sys.argv[1] if len(sys.argv) > 1 else bench_tag())
    spec = ModelSpec.of(stored)
    ids = [encoded.ids for encoded in TextTokenizer(stored.path, spec.max_length).encode(short_texts(512))]
    cores = os.cpu_count() or 1
    served = load_backend("onnx-int8", stored.path, spec, cores)
    single, intra_op = copy.copy(served), copy.copy(served)  # the same sessions, run another way
    single.streams = Streams(served.streams.narrow, None)
    intra_op.streams = Streams(served.streams.wide or served.streams.narrow, None)
    ways = {"1 thread": single, f"{cores} intra-op threads": intra_op, f"{cores} streams (served)": served}
    best: dict[str, dict[int, tuple[float, float]]] = {way: {} for way in ways}
    for size in SIZES:
        for _ in range(ROUNDS):
            for way, backend in ways.items():
                wall, cpu = timed(backend, spec, ids, size)
                kept = best[way].get(size, (float("inf"), float("inf")))
                best[way][size] = (min(kept[0], wall), min(kept[1], cpu))
    rows = {
        str(size): {way: {"wall_ms": round(best[way][size][0], 2), "cpu_ms": round(best[way][size][1], 2)} for way in ways}
        for size in SIZES
    }
    path = write_result("threads.json", {"model": str(stored.tag), "backend": "onnx-int8", "rounds": ROUNDS, "per_pass": rows})
    for size, row in rows.items():
        print(size, row)
    print(path)


if __name__ == "__main__":
    main()
