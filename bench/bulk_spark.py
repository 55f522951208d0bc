"""``bulk.spark`` on Spark's local mode against ``bulk.embed``, same machine, model, texts and backend, in turns.

    make bench-bulk-spark      # → bench/results/bulk-spark.json (~10 min on 2 cores)

Both jobs as their users run them, each in a process of its own: ``python -m bulk.embed`` (its
backend on every core) and ``python -m bulk.spark --master local[2]`` (two task slots, a Python
worker each, one backend thread each), on a corpus of the load's short texts, ``ROUNDS`` times in
turns. Each run's texts/s as its summary counts them (bulk.embed: from its first window, the model
loaded; bulk.spark: from reading the input, the workers' model loads and Spark's shuffle
included, the JVM's start not) and its whole process's wall time; the best run of each, their ratio,
and the two outputs held to each other: ids, parts, and the cosine of every pair of vectors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.bulk import corpus
from harness.results import write_result
from harness.serving import ROOT

BUILD = ROOT / "build" / "bulk-spark"
TEXTS, WINDOW, ROUNDS = 49_152, 8192, 2  # 6 windows: 3 for each of local[2]'s task slots
BACKEND = "onnx-int8"  # what auto serves on this CPU class (bench/results/bulk.json); named, so both run it


def timed(command: list[str], log: Path) -> tuple[dict, float]:
    """A job's summary (its manifest's) and its process's wall time."""
    started = time.perf_counter()
    with log.open("w") as out:
        subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=out, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - started
    output = Path(command[command.index("--output") + 1])
    return json.loads((output / "manifest.json").read_text())["summary"], round(wall, 1)


def job(kind: str, tag: str, source: Path, run: int) -> dict:
    output = BUILD / f"out-{kind}-{run}"
    subprocess.run(["rm", "-rf", str(output)], check=True)
    common = [
        "--model",
        tag,
        "--input",
        str(source),
        "--id-field",
        "id",
        "--output",
        str(output),
        "--backend",
        BACKEND,
        "--window",
        str(WINDOW),
    ]
    extra = ["--master", "local[2]"] if kind == "spark" else []
    summary, wall = timed([sys.executable, "-m", f"bulk.{kind}", *extra, *common], output.with_suffix(".log"))
    return {
        "output": output,
        "texts_per_s": summary["texts_per_s"],
        "seconds": summary["seconds"],
        "process_wall_s": wall,
        "summary": summary,
    }


def compared(single: Path, spark: Path) -> dict:
    """The two outputs side by side: the same ids in the same parts, and every vector's cosine to its twin."""
    manifests = [json.loads((output / "manifest.json").read_text()) for output in (single, spark)]
    tables = [
        pa.concat_tables(pq.read_table(output / part["file"]) for part in manifest["parts"])
        for output, manifest in zip((single, spark), manifests)
    ]
    vectors = [np.stack(table["vector"].to_numpy(zero_copy_only=False)) for table in tables]
    cosines = np.sum(vectors[0] * vectors[1], axis=1) / (np.linalg.norm(vectors[0], axis=1) * np.linalg.norm(vectors[1], axis=1))
    return {
        "same_ids_in_order": tables[0]["id"] == tables[1]["id"],
        "same_parts": manifests[0]["parts"] == manifests[1]["parts"],
        "min_cosine": round(float(cosines.min()), 7),
        "identical_vectors": bool(np.array_equal(vectors[0], vectors[1])),
    }


def main() -> None:
    from bench.ceiling import bench_tag

    tag = bench_tag()
    source = corpus(BUILD / f"corpus-{TEXTS}.jsonl", TEXTS)
    report: dict = {
        "model": tag,
        "texts": f"harness.texts.short_texts (5-30 words), seed 7: {TEXTS:,}",
        "backend": BACKEND,
        "window": WINDOW,
        "niceness": os.nice(0),  # both sides run at it: the ratio is the figure, the machine may be shared
        "load_average_before": [round(load, 2) for load in os.getloadavg()],
        "runs": [],
    }
    for run in range(ROUNDS):
        for kind in ("embed", "spark"):
            result = job(kind, tag, source, run)
            print(kind, run, {key: value for key, value in result.items() if key not in ("output", "summary")}, flush=True)
            report["runs"].append({"job": f"bulk.{kind}", **{key: value for key, value in result.items() if key != "output"}})
    report["load_average_after"] = [round(load, 2) for load in os.getloadavg()]
    best = {
        kind: max((run for run in report["runs"] if run["job"] == f"bulk.{kind}"), key=lambda run: run["texts_per_s"])
        for kind in ("embed", "spark")
    }
    report["best_texts_per_s"] = {f"bulk.{kind}": run["texts_per_s"] for kind, run in best.items()}
    report["spark_over_embed"] = round(best["spark"]["texts_per_s"] / best["embed"]["texts_per_s"], 2)
    walls = {kind: min(run["process_wall_s"] for run in report["runs"] if run["job"] == f"bulk.{kind}") for kind in ("embed", "spark")}
    report["spark_over_embed_by_process_wall"] = round(walls["embed"] / walls["spark"], 2)  # start-ups included: JVM, model loads
    report["vectors"] = compared(BUILD / "out-embed-0", BUILD / "out-spark-0")
    print(write_result("bulk-spark.json", report))


if __name__ == "__main__":
    main()
