"""``make bench``: the in-process ceiling, textbento and three baselines under the same loads, in one run.

    python -m bench.run [--quick]       # bench/results/bench.json, bench.md, embed.png, classify.png

Both models: the default all-MiniLM-L6-v2 (embeddings) and a full-size DistilBERT-SST2-shaped
classifier with random weights (66M parameters: the real model's cost, not its accuracy).
Every ratio in the report is computed within this run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness.load import closed_loop
from harness.results import RESULTS, write_result
from harness.serving import ROOT, serve
from harness.testmodels import build_classifier
from harness.texts import short_texts

SYSTEMS = {  # name → (target, uvicorn factory?)
    "textbento": ("service:TextBento", False),
    "naive-fastapi": ("bench.baselines.fastapi_apps:naive", True),
    "fastapi-threadpool": ("bench.baselines.fastapi_apps:threadpool", True),
    "bentoml-plain": ("bench.baselines.bentoml_plain:Plain", False),
}
# (mix, texts per request, concurrency): the matrix, plus 32 × c8 where its target is set.
LOADS = [
    *(("short", 1, c) for c in (1, 16, 64, 256)),
    *(("short", 32, c) for c in (1, 8, 16, 64)),
    *(("long", 1, c) for c in (1, 16, 64, 256)),
]


class Progress:
    """One line per load point as it ends: how far, and an ETA from the points so far."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.started = total, 0, time.monotonic()

    def point(self, label: str, row: dict) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.started
        eta = elapsed / self.done * (self.total - self.done)
        print(f"[{self.done}/{self.total}, ETA {eta / 60:.0f} min] {label}: {json.dumps(row)}", flush=True)


def long_texts(count: int) -> list[str]:
    """A long mix: 20 to ~600 words, so some exceed the model's max_length and are truncated."""
    words = " ".join(short_texts(4 * count, seed=2)).split()
    lengths = [20 + (i * 97) % 580 for i in range(count)]
    return [" ".join(words[i * 7 : i * 7 + n]) for i, n in enumerate(lengths)]


def import_models() -> dict[str, str]:
    """Store tags of the two benchmark models, imported through the real CLI."""

    def run_import(*args: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "train_import.import_model", *args], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.strip()

    classifier = build_classifier(Path(tempfile.mkdtemp(prefix="distilbert-full-")), size="full")
    return {"embed": run_import("--name", "bench-minilm"), "classify": run_import("--path", str(classifier), "--name", "bench-distilbert")}


def measure(url: str, task: str, quick: bool, progress: Progress, label: str) -> list[dict]:
    path, field = ("/v1/embeddings", "input") if task == "embed" else ("/v1/classify", "inputs")
    corpus = {"short": short_texts(2048), "long": long_texts(512)}
    rows = []
    for mix, per_request, concurrency in LOADS:
        texts = corpus[mix]
        body = lambda i, t=texts, k=per_request: {field: [t[(i * k + j) % len(t)] for j in range(k)]}
        result = asyncio.run(
            closed_loop(
                url + path, body, concurrency=concurrency, requests=10**6, deadline_s=4 if quick else 8, texts_per_request=per_request
            )
        )
        rows.append({"mix": mix, "texts_per_request": per_request, **result.summary()})
        progress.point(label, rows[-1])
    return rows


def bench_system(name: str, tag: str, task: str, quick: bool, progress: Progress) -> dict:
    target, factory = SYSTEMS[name]
    with serve(target, env={"TEXTBENTO_MODEL": tag}, uvicorn_factory=factory) as server:
        peak = [server.rss_mib()]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(1):
                peak.append(server.rss_mib())

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            rows = measure(server.url, task, quick, progress, f"{task} {name}")
        finally:
            done.set()
            sampler.join()
    return {"rows": rows, "peak_rss_mib": round(max(peak), 1)}


def main() -> None:
    from bench.ceiling import ceilings
    from bench.report import write_report
    from serving.settings import settings

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="shorter runs (4 s per load point)")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    args = parser.parse_args()
    tags = import_models()
    report: dict = {"backend": settings.backend, "models": {}}
    systems = args.systems.split(",")
    progress = Progress(len(tags) * len(systems) * len(LOADS))
    for task, tag in tags.items():
        backend, rows = ceilings(settings.backend, tag)
        entry = report["models"][task] = {"tag": tag, "backend": backend, "ceiling": rows, "systems": {}}
        for name in systems:
            print(f"== {task} {name}", flush=True)
            entry["systems"][name] = bench_system(name, tag, task, args.quick, progress)
    write_result("bench.json", report, indent=2)
    write_report(report, RESULTS)


if __name__ == "__main__":
    main()
