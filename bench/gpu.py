"""The GPU figures: in-process ceilings and served load points of the ``torch`` backend (fp16 on CUDA).

Run by bench/gpu.sh on the lent GPU machine (or rehearsed on a CPU one), a part per step so that
each runs under its own time limit; every part adds its key to ``<out>/gpu-<GPU name>.json``:

    python -m bench.gpu check                 # versions; fails without CUDA
    python -m bench.gpu build --vocab DIR     # three random-weight models from configs → the store
    python -m bench.gpu ceiling --out DIR     # in process: sentences/s at batch 1-256, sorted batches
    python -m bench.gpu served --out DIR      # the real ``bentoml serve``, 4 load points per model
    python -m bench.gpu table --out DIR       # the short table

Models: MiniLM-L6-shaped and BERT-base-shaped embedders and a MiniLM-L6-shaped cross-encoder, with
random weights (speed does not depend on them) and all-MiniLM-L6-v2's vocabulary (token counts
do). Only ``torch``: ONNX Runtime's CUDA wheel (256 MB) cannot travel to the machine, and the
ONNX export breaks on transformers 5 (docs/design.md §15). A backend that lands on the CPU is a
failure, not a number, unless ``--rehearsal`` (CPU, tiny loads: every step but CUDA proven).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bentoml

from bench.ceiling import ceiling
from harness.load import closed_loop
from harness.results import write_result
from harness.serving import serve
from harness.texts import short_texts
from serving.settings import settings

# name → (BertConfig fields, task); MiniLM-L6 = all-MiniLM-L6-v2 / ms-marco-MiniLM-L-6-v2, BERT-base = BertConfig's defaults.
MINILM = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536}
MODELS = {"gpu-minilm-l6": (MINILM, "embed"), "gpu-bert-base": ({}, "embed"), "gpu-cross-encoder": (MINILM, "rerank")}
LOADS = [(1, 1), (1, 64), (32, 8), (1, 256)]  # (texts or documents per request, concurrency)


class Plan:
    """How long and how big: the real run, or the CPU rehearsal's tiny one."""

    def __init__(self, rehearsal: bool) -> None:
        self.rehearsal = rehearsal
        self.batch_sizes = (1, 4) if rehearsal else (1, 2, 4, 8, 16, 32, 64, 128, 256)
        self.ceiling_seconds = 0.2 if rehearsal else 2.0
        self.load_seconds = 1 if rehearsal else 6
        self.warmup_per_client = 1 if rehearsal else 4  # requests per concurrent client before a point
        self.layers = 2 if rehearsal else None  # the rehearsal's models: 2 layers, real widths


def gpu_info(rehearsal: bool) -> dict[str, str]:
    """Name, driver and memory of the first GPU, from nvidia-smi (a stand-in in the rehearsal)."""
    if rehearsal and shutil.which("nvidia-smi") is None:
        return {"name": "rehearsal-cpu", "driver": "none", "memory": "none"}
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    line = subprocess.run(query, check=True, capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    name, driver, memory = (field.strip() for field in line.rsplit(",", 2))
    return {"name": name, "driver": driver, "memory": memory}


def result_path(out: Path, rehearsal: bool) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_info(rehearsal)["name"].lower()).strip("-")
    return out / f"gpu-{slug}.json"


def record(out: Path, rehearsal: bool, key: str, value: Any) -> Path:
    """Adds ``key`` to the result file (each part writes its own, so a part that times out keeps the others')."""
    path = result_path(out, rehearsal)
    report = json.loads(path.read_text()) if path.exists() else {"gpu": gpu_info(rehearsal), "rehearsal": rehearsal}
    report.pop("cpu", None)  # write_result adds it again
    return write_result(path, {**report, key: value, "versions": versions()}, indent=2)


def versions() -> dict[str, Any]:
    import platform

    import tokenizers
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "bentoml": bentoml.__version__,
    }


def build(vocab: Path, plan: Plan) -> list[str]:
    """The three models, built from configs with random weights and ``vocab``'s tokenizer (and, for the
    embedders, its sentence-transformers files: mean pooling, normalized), imported without ONNX."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel

    from models.store import import_model

    tokenizer = AutoTokenizer.from_pretrained(str(vocab))
    tags = []
    for name, (shape, task) in MODELS.items():
        torch.manual_seed(0)
        config = BertConfig(vocab_size=tokenizer.vocab_size, **shape)
        config.num_hidden_layers = plan.layers or config.num_hidden_layers
        directory = Path(tempfile.mkdtemp(prefix=f"{name}-"))
        if task == "embed":
            shutil.copytree(vocab, directory, dirs_exist_ok=True)  # tokenizer + sentence-transformers files
            BertModel(config).eval().save_pretrained(directory)
        else:
            tokenizer.save_pretrained(directory)
            config.num_labels = 1  # one logit: a cross-encoder's score, served on /v1/rerank
            BertForSequenceClassification(config).eval().save_pretrained(directory)
        tags.append(str(import_model(directory, name=name, task="auto", source=f"random {name}", onnx=False)))
        shutil.rmtree(directory)
        print(tags[-1], flush=True)
    return tags


def check(plan: Plan) -> None:
    """The versions, and CUDA there before anything is built: a machine without it fails in seconds."""
    print(versions(), flush=True)
    import torch

    check_device("cuda" if torch.cuda.is_available() else "cpu", "torch", plan)


def check_device(device: str, what: str, plan: Plan) -> None:
    if device != "cuda" and not plan.rehearsal:
        raise SystemExit(f"{what} runs on {device}, not CUDA; {versions()}")


def ceilings(out: Path, plan: Plan) -> None:
    """Each model's in-process ceiling, sorted batches, each batch one pass (the token budget lifted)."""
    report = {
        "batch_sizes": plan.batch_sizes,
        "seconds_per_point": plan.ceiling_seconds,
        "batches": "consecutive runs of the stream sorted by length, tokenization included, each one forward pass",
        "models": {},
    }
    for name in MODELS:
        tag = str(bentoml.models.get(f"{name}:latest").tag)
        resolved, device, rows = ceiling("torch", tag, plan.batch_sizes, seconds=plan.ceiling_seconds, sort=True, token_budget=10**9)
        check_device(device, f"{name}'s {resolved} backend", plan)
        report["models"][name] = {"backend": resolved, "device": device, "rows": rows}
        print(name, device, json.dumps(rows), flush=True)
        record(out, plan.rehearsal, "ceiling", report)


@contextmanager
def gpu_sampler(out: dict):
    """nvidia-smi every 200 ms while the block runs: ``out`` gets utilisation (%) and memory (MiB), or None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        out["gpu"] = None
        yield
        return
    query = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "200"]
    sampler = subprocess.Popen(query, stdout=subprocess.PIPE, text=True)
    try:
        yield
    finally:
        sampler.terminate()
        lines = sampler.communicate(timeout=10)[0].splitlines()
        samples = [tuple(float(v) for v in line.split(",")[:2]) for line in lines if line.count(",") >= 1]
        utilisation = [u for u, _ in samples]
        out["gpu"] = {
            "samples": len(samples),
            "utilization_mean_pct": round(sum(utilisation) / len(utilisation), 1) if samples else None,
            "utilization_max_pct": max(utilisation, default=None),
            "memory_used_max_mib": max((m for _, m in samples), default=None),
        }


async def load_points(base_url: str, name: str, task: str, plan: Plan) -> list[dict]:
    """The four load points on one model: /v1/embeddings (texts) or /v1/rerank (1 query, k documents)."""
    texts = short_texts(2048)
    rows = []
    for per_request, concurrency in LOADS:

        def body(i: int, k: int = per_request) -> dict:
            chosen = [texts[(i * k + j) % len(texts)] for j in range(k)]
            if task == "rerank":
                return {"model": name, "query": texts[i % len(texts)], "documents": chosen}
            return {"model": name, "input": chosen}

        url = f"{base_url}/v1/{'rerank' if task == 'rerank' else 'embeddings'}"
        await closed_loop(url, body, concurrency=concurrency, requests=concurrency * plan.warmup_per_client, deadline_s=30)
        row: dict[str, Any] = {"texts_per_request": per_request}
        with gpu_sampler(row):
            result = await closed_loop(
                url, body, concurrency=concurrency, requests=10**6, deadline_s=plan.load_seconds, texts_per_request=per_request
            )
        rows.append({**row, **result.summary()})
        if result.errors:
            rows[-1]["sample_errors"] = result.sample_errors
        print(name, json.dumps(rows[-1]), flush=True)
    return rows


def served(out: Path, plan: Plan) -> None:
    """One ``bentoml serve`` of the three models (an Encoder each, sharing the GPU), loaded one model at a time."""
    tags = [str(bentoml.models.get(f"{name}:latest").tag) for name in MODELS]
    env = {"TEXTBENTO_MODELS": ",".join(tags), "TEXTBENTO_BACKEND": "torch"}
    with serve(env=env, log_path=out / "serve.log") as server:
        with urllib.request.urlopen(f"{server.url}/v1/models", timeout=30) as response:
            cards = {card["id"]: card for card in json.load(response)["data"]}  # id: the store name
        report: dict[str, Any] = {"seconds_per_point": plan.load_seconds, "token_budget": settings.token_budget, "models": {}}
        for name, (_, task) in MODELS.items():
            card = cards[name]
            check_device(card["device"], f"the served {name} ({card['backend']})", plan)
            rows = asyncio.run(load_points(server.url, name, task, plan))
            report["models"][name] = {"backend": card["backend"], "device": card["device"], "rows": rows}
            record(out, plan.rehearsal, "served", report)
    if any(row["errors"] for entry in report["models"].values() for row in entry["rows"]):
        raise SystemExit("served load points had errors (see sample_errors above)")


def table(out: Path, plan: Plan) -> None:
    path = result_path(out, plan.rehearsal)
    report = json.loads(path.read_text())
    print(f"\n{report['gpu']['name']}, driver {report['gpu']['driver']}, {report['versions']}")
    if "ceiling" in report:
        sizes = report["ceiling"]["batch_sizes"]
        print(f"\n{'ceiling, sentences/s':<28}" + "".join(f"{'bs' + str(size):>8}" for size in sizes))
        for name, entry in report["ceiling"]["models"].items():
            rates = {row["batch_size"]: row["sentences_per_s"] for row in entry["rows"]}
            label = f"{name} ({entry['device']})"
            print(f"{label:<28}" + "".join(f"{rates.get(size, float('nan')):>8.0f}" for size in sizes))
    if "served" in report:
        print(f"\n{'served, torch':<34}{'texts/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>7}{'GPU %':>7}")
        for name, entry in report["served"]["models"].items():
            for row in entry["rows"]:
                point = f"{name} {row['texts_per_request']}x c{row['concurrency']}"
                utilisation = (row["gpu"] or {}).get("utilization_mean_pct")
                print(
                    f"{point:<34}{row['texts_per_s']:>9.0f}{row['p50_ms']:>9.1f}{row['p99_ms']:>9.1f}{row['errors']:>7}"
                    f"{'-' if utilisation is None else utilisation:>7}"
                )
    print(f"\n→ {path}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu")
    parser.add_argument("part", choices=("check", "build", "ceiling", "served", "table"))
    parser.add_argument("--out", type=Path, help="the output folder (ceiling, served, table)")
    parser.add_argument("--vocab", type=Path, help="a tokenizer folder, e.g. all-MiniLM-L6-v2's files without weights (build)")
    parser.add_argument("--rehearsal", action="store_true", help="on a CPU machine: no CUDA asserts, tiny models and loads")
    args = parser.parse_args()
    # bench/gpu.sh's time limit sends SIGTERM: exit through the context managers, so that the server
    # (a process group of its own, out of `timeout`'s reach) is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    plan = Plan(args.rehearsal)
    if args.part == "check":
        check(plan)
    elif args.part == "build":
        build(args.vocab, plan)
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        {"ceiling": ceilings, "served": served, "table": table}[args.part](args.out, plan)


if __name__ == "__main__":
    main()
