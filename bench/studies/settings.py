"""One setting's values served side by side: throughput and latency of each, this tree, measured in pairs.

    python -m bench.studies.settings TEXTBENTO_MAX_BATCH_SIZE 64 256 --out batch-size-paired.json
    python -m bench.studies.settings TEXTBENTO_CALLS_IN_FLIGHT 2 3 4 --out calls-in-flight.json
    python -m bench.studies.settings TEXTBENTO_RUNNER_THREADS 2 1 --points 1x1,1x64 --out threads-served.json

This tree serves the embedded model once per value, all at once, and each round measures each point
(``--points``, texts per request × concurrency; by default 1 × c64 and 32 × c8, since at c=1 a batch
holds one call whatever a batching setting) on every server in turn, seconds apart, the order
reversed every other round: the machine's speed drifts by tens of percent within minutes, and
figures measured seconds apart compare like with like.
Each value's medians over the rounds, and each round's ratio to the first value
(``paired_ratios``). A default chosen by a number is chosen from one of these files (docs/design.md
3 and 6).
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack

import bentoml

from bench import write_result
from bench.compare import import_default, load, median_rows, parse_point
from harness.serving import ROOT, serve

POINTS = "1x64,32x8"
ROUNDS = 4
SECONDS = 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("setting", help="a TEXTBENTO_* variable")
    parser.add_argument("values", nargs="+")
    parser.add_argument("--points", default=POINTS, help="texts per request x concurrency, comma-separated")
    parser.add_argument("--out", required=True, help="file name under bench/results/")
    args = parser.parse_args()
    points = [parse_point(point) for point in args.points.split(",")]
    tag = import_default(ROOT, "settings-study")
    rounds: dict[str, list[dict[str, dict]]] = {value: [] for value in args.values}
    try:
        with ExitStack() as servers:
            urls = {value: servers.enter_context(serve(env={"TEXTBENTO_MODEL": tag, args.setting: value})).url for value in args.values}
            for round_ in range(ROUNDS):
                figures: dict[str, dict[str, dict]] = {value: {} for value in args.values}
                for k, c in points:
                    for value in args.values[:: 1 if round_ % 2 == 0 else -1]:
                        figures[value][f"{k}x-c{c}"] = load(urls[value] + "/v1/embeddings", k, c, SECONDS)
                for value, rows in figures.items():
                    rounds[value].append(rows)
                    print(value, {point: (row["texts_per_s"], row["p50_ms"], row["p99_ms"], row["errors"]) for point, row in rows.items()})
    finally:
        bentoml.models.delete(tag)
    names = [f"{k}x-c{c}" for k, c in points]
    keys = ("texts_per_s", "p50_ms", "p99_ms", "errors")
    medians = {value: median_rows(rows, names, keys) for value, rows in rounds.items()}
    first = args.values[0]
    paired = {
        value: {p: [round(r[p]["texts_per_s"] / f[p]["texts_per_s"], 3) for r, f in zip(rows, rounds[first])] for p in names}
        for value, rows in rounds.items()
        if value != first
    }
    report = {"setting": args.setting, "rounds": ROUNDS, "seconds": SECONDS, "medians": medians, "paired_ratios": paired, "runs": rounds}
    print(paired)
    print(write_result(args.out, report))


if __name__ == "__main__":
    main()
