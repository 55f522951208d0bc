"""The Encoder's ``TEXTBENTO_MAX_BATCH_SIZE``: throughput and latency by setting, served side by side.

    python -m bench.studies.batch_size   # → bench/results/batch-size.json (two runs kept: batch-size-a.json, -b.json)

A larger batch sorts more of what is queued by length before cutting passes (the peer sorts its
whole queue) and pays the per-pass cost fewer times, but a call is answered only when its whole
batch is: this tree serves the embedded model with each setting in turns, 3 rounds, at 1 text × c=64
and 32 texts × c=8 (at c=1 a batch holds one call whatever the setting); each point keeps its best
round (``bench.compare``).
"""

from __future__ import annotations

import bentoml

from bench import write_result
from bench.compare import better, import_default, measure
from harness.serving import ROOT

SETTINGS = (64, 128, 256)
POINTS = [(1, 64), (32, 8)]
ROUNDS = 3


def main() -> None:
    tag = import_default(ROOT, "batch-size-study")
    best: dict[int, dict[str, dict]] = {size: {} for size in SETTINGS}
    try:
        for _ in range(ROUNDS):
            for size in SETTINGS:
                for point, row in measure(ROOT, tag, 8, POINTS, {"TEXTBENTO_MAX_BATCH_SIZE": str(size)}).items():
                    best[size][point] = better(best[size].get(point), row)
                print(size, {point: (row["texts_per_s"], row["p50_ms"], row["p99_ms"], row["errors"]) for point, row in best[size].items()})
    finally:
        bentoml.models.delete(tag)
    write_result("batch-size.json", {"setting": "TEXTBENTO_MAX_BATCH_SIZE", "rounds": ROUNDS, "seconds": 8, "results": best})


if __name__ == "__main__":
    main()
