"""Resident memory of the served service by worker count: what each extra API/tokenizer worker costs.

    python -m bench.studies.memory [--workers 1,2,3]    → bench/results/memory.json

Serves the default model (with its ONNX graphs) with ``TEXTBENTO_WORKERS`` = each count, sends a
few hundred mixed requests so every worker has tokenized and answered, then records the RSS of
the whole process tree and of each process, named by its role.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import psutil

from bench import RESULTS, write_result
from harness.load import closed_loop
from harness.serving import role, serve
from harness.texts import short_texts


def measure(tag: str, workers: int) -> dict:
    texts = short_texts(512)
    with serve(env={"TEXTBENTO_MODEL": tag, "TEXTBENTO_WORKERS": str(workers)}) as server:
        body = lambda i: {"input": [texts[(i * 4 + j) % len(texts)] for j in range(1 + i % 8)]}
        asyncio.run(closed_loop(server.url + "/v1/embeddings", body, concurrency=16, requests=400, deadline_s=60))
        root = psutil.Process(server.process.pid)
        by_role: dict[str, list[float]] = {}
        for process in [root, *root.children(recursive=True)]:
            by_role.setdefault(role(" ".join(process.cmdline())), []).append(round(process.memory_info().rss / 2**20, 1))
        return {"workers": workers, "total_mib": round(server.rss_mib(), 1), "processes_mib": by_role}


def main() -> None:
    from bench.ceiling import bench_tag

    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="1,2,3")
    args = parser.parse_args()
    rows = [measure(bench_tag(), int(count)) for count in args.workers.split(",")]
    for previous, row in zip(rows, rows[1:]):
        row["per_extra_worker_mib"] = round((row["total_mib"] - previous["total_mib"]) / (row["workers"] - previous["workers"]), 1)
    RESULTS.mkdir(exist_ok=True)
    write_result("memory.json", rows, indent=2)
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
