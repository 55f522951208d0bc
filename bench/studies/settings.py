"""One setting's values served side by side: throughput and latency of each, this tree, in turns.

    python -m bench.studies.settings TEXTBENTO_MAX_BATCH_SIZE 64 128 256 --out batch-size.json
    python -m bench.studies.settings TEXTBENTO_CALLS_IN_FLIGHT 2 3 4 --out calls-in-flight.json

This tree serves the embedded model with each value in turns, 3 rounds, at 1 text × c=64 and 32
texts × c=8 (at c=1 a batch holds one call whatever the setting); each point keeps its best round
(``bench.compare``). A default chosen by a number is chosen from one of these files
(docs/design.md 3 and 6).
"""

from __future__ import annotations

import argparse

import bentoml

from bench import write_result
from bench.compare import better, import_default, measure
from harness.serving import ROOT

POINTS = [(1, 64), (32, 8)]
ROUNDS = 3
SECONDS = 8


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("setting", help="a TEXTBENTO_* variable")
    parser.add_argument("values", nargs="+")
    parser.add_argument("--out", required=True, help="file name under bench/results/")
    args = parser.parse_args()
    tag = import_default(ROOT, "settings-study")
    best: dict[str, dict[str, dict]] = {value: {} for value in args.values}
    try:
        for _ in range(ROUNDS):
            for value in args.values:
                for point, row in measure(ROOT, tag, SECONDS, POINTS, {args.setting: value}).items():
                    best[value][point] = better(best[value].get(point), row)
                print(
                    value, {point: (row["texts_per_s"], row["p50_ms"], row["p99_ms"], row["errors"]) for point, row in best[value].items()}
                )
    finally:
        bentoml.models.delete(tag)
    write_result(args.out, {"setting": args.setting, "rounds": ROUNDS, "seconds": SECONDS, "results": best})


if __name__ == "__main__":
    main()
