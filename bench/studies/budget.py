"""The token budget's price: the runner's memory against its speed, per budget, in process.

    python -m bench.studies.budget    # DistilBERT-66M, long texts → bench/results/budget.json

Padded batches make ONNX Runtime's arena keep intermediates of ``[budget, FFN width]`` floats
(3,072 wide for DistilBERT), so the budget sets the Encoder's resident memory, while a pass of a
few thousand tokens already amortises the fixed cost of a pass (``bench.studies.pass_cost``).
Each budget runs in a process of its own (the arena only grows): the long mix of
``bench.run`` (20 to ~600 words, a third cut at 512 tokens), in runs of 64 through ``run_batch``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bentoml
import psutil

from bench import RESULTS

BUDGETS = (8192, 4096, 2048, 1024)
MODEL = "bench-distilbert-budget"


def measure(tag: str, budget: int) -> dict[str, float]:
    from bench.run import long_texts
    from models.backends import load_backend
    from models.inference import run_batch
    from models.spec import ModelSpec
    from models.tokenization import TextTokenizer
    from serving.settings import settings

    stored = bentoml.models.get(tag)
    spec = ModelSpec.of(stored)
    ids = [e.ids for e in TextTokenizer(stored.path, spec.max_length).encode(long_texts(256))]
    backend = load_backend("onnx-int8", stored.path, spec, settings.runner_threads)
    started = time.perf_counter()
    for start in range(0, len(ids), 64):
        run_batch(backend, ids[start : start + 64], spec.pad_id, budget)
    rate = len(ids) / (time.perf_counter() - started)
    # Resident after the runs: what the arena keeps (the peak includes loading the session).
    return {"token_budget": budget, "texts_per_s": round(rate, 1), "rss_mib": round(psutil.Process().memory_info().rss / 2**20)}


def main() -> None:
    from harness.testmodels import build_classifier
    from models.store import import_model

    try:
        tag = str(bentoml.models.get(f"{MODEL}:latest").tag)
    except bentoml.exceptions.NotFound:
        tag = str(import_model(build_classifier(Path(tempfile.mkdtemp()), size="full"), name=MODEL))
    rows = []
    for budget in BUDGETS:
        command = [sys.executable, "-m", "bench.studies.budget", "--measure", tag, str(budget)]
        rows.append(json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1]))
        print(rows[-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "budget.json").write_text(
        json.dumps({"model": tag, "texts": "long mix, 256 texts in runs of 64", "rows": rows}, indent=2) + "\n"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        print(json.dumps(measure(sys.argv[2], int(sys.argv[3]))))
    else:
        main()
