"""The GPU numbers: in-process ceilings of the CUDA backends and three served load points, in one run.

    make bench-gpu                              # on a CUDA machine: GPU venv, model import, then this
    python -m bench.gpu --tag bench-minilm:latest   # GPU runtimes installed, model in the store

In process (``bench.ceiling.ceiling``): sentences/s of short texts (5-30 words), tokenization
included, at batch sizes 1-128, for ``onnx`` (the fp16 graph on ONNX Runtime's CUDA provider) and
``torch`` (fp16 on CUDA). A backend that lands on the CPU is a failure, not a number.
Served: the real ``bentoml serve`` (backend ``auto``, which must resolve to CUDA as well) under
closed-loop load on /v1/embeddings: 1 text/request at c=1 and c=64, 32 texts/request at c=8, 8 s
each. Writes bench/results/gpu-<GPU name>.json and prints a short table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import bentoml

from bench import write_result
from bench.ceiling import ceiling
from bench.load import closed_loop
from bench.serving import serve
from bench.topology import RESULTS, short_texts
from models.backends import load_backend
from models.spec import ModelSpec
from serving.settings import settings

BACKENDS = ("onnx", "torch")
BATCH_SIZES = (1, 8, 32, 64, 128)
CEILING_SECONDS = 3.0
LOADS = [(1, 1), (1, 64), (32, 8)]  # (texts per request, concurrency)
LOAD_SECONDS = 8


def gpu_info(line: str | None) -> dict[str, str]:
    """Name, driver and memory of the first GPU: ``line`` of nvidia-smi's CSV, or nvidia-smi asked now."""
    if line is None:
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        line = subprocess.run(query, check=True, capture_output=True, text=True).stdout.splitlines()[0]
    name, driver, memory = (field.strip() for field in line.rsplit(",", 2))
    return {"name": name, "driver": driver, "memory": memory}


def device_of(backend_name: str, tag: str) -> str:
    """Where ``backend_name`` runs the stored model once loaded: ``cuda`` or ``cpu``."""
    stored = bentoml.models.get(tag)
    return load_backend(backend_name, stored.path, ModelSpec.of(stored), settings.runner_threads).device


def versions() -> dict[str, Any]:
    import onnxruntime as ort
    import torch

    return {
        "onnxruntime": ort.__version__,
        "onnxruntime_providers": ort.get_available_providers(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "bentoml": bentoml.__version__,
    }


def served_backend(base_url: str) -> dict[str, str]:
    """The Encoder's backend and device, as /v1/models reports them."""
    with urllib.request.urlopen(f"{base_url}/v1/models", timeout=30) as response:
        card = json.load(response)["data"][0]
    return {"backend": card["backend"], "device": card["device"]}


async def measure(url: str) -> list[dict]:
    """Each load point after a short warm-up at its own concurrency (as bench.topology does)."""
    texts = short_texts(2048)
    rows = []
    for per_request, concurrency in LOADS:

        def body(i: int, k: int = per_request) -> dict:
            return {"input": [texts[(i * k + j) % len(texts)] for j in range(k)]}

        await closed_loop(url, body, concurrency=concurrency, requests=concurrency * 4, deadline_s=30)
        result = await closed_loop(
            url, body, concurrency=concurrency, requests=10**6, deadline_s=LOAD_SECONDS, texts_per_request=per_request
        )
        rows.append({"texts_per_request": per_request, **result.summary()})
        if result.errors:
            rows[-1]["sample_errors"] = result.sample_errors
        print(json.dumps(rows[-1]), flush=True)
    return rows


def print_table(report: dict) -> None:
    print(f"\n{report['gpu']['name']}, driver {report['gpu']['driver']}, model {report['model']}")
    print(f"{'ceiling, sentences/s':<24}" + "".join(f"{'bs' + str(size):>9}" for size in BATCH_SIZES))
    for name, entry in report["ceiling"].items():
        rates = {row["batch_size"]: row["sentences_per_s"] for row in entry["rows"]}
        print(f"{name + ' (' + entry['device'] + ')':<24}" + "".join(f"{rates.get(size, float('nan')):>9.0f}" for size in BATCH_SIZES))
    served = report["served"]
    print(f"\nserved /v1/embeddings ({served['backend']} on {served['device']}): texts/s, p50, p99, errors")
    for row in served["rows"]:
        point = f"{row['texts_per_request']} text(s) x c{row['concurrency']}"
        print(f"{point:<24}{row['texts_per_s']:>9.0f}{row['p50_ms']:>9.1f}{row['p99_ms']:>9.1f}{row['errors']:>9}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tag", default="bench-minilm:latest", help="stored model (default bench-minilm:latest)")
    parser.add_argument("--gpu", help="nvidia-smi's name,driver_version,memory.total line (default: ask nvidia-smi)")
    args = parser.parse_args()
    tag = str(bentoml.models.get(args.tag).tag)
    report: dict[str, Any] = {"gpu": gpu_info(args.gpu), "model": tag, "texts": "short, 5-30 words"}
    report["runner_threads"] = settings.runner_threads
    report["ceiling_seconds_per_point"] = CEILING_SECONDS
    report["ceiling"] = {}
    for name in BACKENDS:
        device = device_of(name, tag)
        if device != "cuda":
            raise SystemExit(f"backend {name} loaded on {device}, not CUDA; {versions()}")
        resolved, rows = ceiling(name, tag, BATCH_SIZES, seconds=CEILING_SECONDS)
        report["ceiling"][name] = {"backend": resolved, "device": device, "rows": rows}
        print(name, json.dumps(rows), flush=True)

    log = Path(tempfile.gettempdir(), "textbento-gpu-serve.log")
    print(f"serving {tag} (log: {log})", flush=True)
    with serve(env={"TEXTBENTO_MODEL": tag}, log_path=log) as server:
        backend = served_backend(server.url)
        if backend["device"] != "cuda":
            raise SystemExit(f"the served Encoder runs {backend['backend']} on {backend['device']}, not CUDA")
        rows = asyncio.run(measure(f"{server.url}/v1/embeddings"))
    report["served"] = {**backend, "seconds_per_point": LOAD_SECONDS, "rows": rows}
    report["versions"] = versions()

    slug = re.sub(r"[^a-z0-9]+", "-", report["gpu"]["name"].lower()).strip("-")
    path = RESULTS / f"gpu-{slug}.json"
    RESULTS.mkdir(exist_ok=True)
    write_result(path, report, indent=2)
    print_table(report)
    print(f"\n→ {path}")
    if any(row["errors"] for row in rows):
        raise SystemExit("served load points had errors (see sample_errors above)")


if __name__ == "__main__":
    main()
