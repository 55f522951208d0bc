"""What serving several models in one server costs: memory per process and throughput under mixed load.

    python -m bench.studies.several_models [--seconds 15] [--rounds 2]   → bench/results/several-models.json

Three models, as tests/test_several_models.py serves them: the embedded all-MiniLM-L6-v2 (``minilm``),
a one-logit BERT cross-encoder (``cross-encoder``, 32 wide, 2 layers) and a 2-label DistilBERT
classifier (``sst2-test``, 64 wide, 2 layers), random weights (``harness.testmodels``), imported with
their ONNX graphs into a store of their own under /tmp (kept, and reused when the study is rerun).
Two servers run side by side, default settings (``auto`` backend, one API worker per core): MiniLM
alone (``TEXTBENTO_MODEL``) and the three (``TEXTBENTO_MODELS``, one Encoder process each).

- **Memory**: each process's RSS by role (supervisor, API worker, Encoder of which model), after
  warm-up traffic to every model and again after the throughput runs; the stored files per model.
- **Throughput**: 1 text per request (the reranker: 1 query + 4 documents), c=16, ``--seconds``
  each: MiniLM on the one-model server (the reference), then each model's route alone on the
  three-model server, then the three at once (c=16 each). ``--rounds`` rounds, one after the other:
  timings on a shared machine drift, so compare within a round: ``mixed_vs_alone`` per model, and
  its sum (1.0: the three Encoders merely time-share the cores; more: they fill each other's gaps).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import psutil

from bench import write_result
from bench.soak import ROUTES
from harness.load import closed_loop
from harness.serving import serve
from harness.testmodels import build_bert_classifier, build_classifier
from harness.texts import short_texts

STORE = Path(tempfile.gettempdir()) / "textbento-several-models-home"
CONCURRENCY = 16
TEXTS = short_texts(1024)


# Served in this order; the model's task names its route (bench.soak.ROUTES); None: the embedded MiniLM.
MODELS = {
    "minilm": ("embed", None),
    "cross-encoder": ("rerank", partial(build_bert_classifier, num_labels=1)),
    "sst2-test": ("classify", build_classifier),
}
ONE_TEXT = {
    "embed": lambda text, i: {"input": text},
    "classify": lambda text, i: {"inputs": text},
    "rerank": lambda text, i: {"query": text, "documents": [TEXTS[(i + k) % len(TEXTS)] for k in range(1, 5)]},
}


def mib(path: Path) -> float:
    """A file's size, or everything under a directory."""
    files = path.rglob("*") if path.is_dir() else [path]
    return round(sum(file.stat().st_size for file in files if file.is_file()) / 2**20, 1)


def stored_models() -> dict[str, dict]:
    """Each model's tag and file sizes, imported into ``STORE`` unless an earlier run left it there."""
    models = {}
    for name, (_, build) in MODELS.items():
        if not (STORE / "models" / name / "latest").exists():
            with tempfile.TemporaryDirectory(prefix=f"several-{name}-") as built:
                source = [] if build is None else ["--path", str(build(Path(built)))]
                subprocess.run([sys.executable, "-m", "train_import.import_model", *source, "--name", name], env=os.environ, check=True)
        version = (STORE / "models" / name / "latest").read_text().strip()
        stored = STORE / "models" / name / version
        files = {file.name: mib(file) for file in sorted([*stored.glob("*.safetensors"), *(stored / "onnx").glob("*.onnx")])}
        models[name] = {"tag": f"{name}:{version}", "stored_mib": mib(stored), "files_mib": files}
    return models


def service_name(process: psutil.Process) -> str | None:
    """The BentoML service a worker process serves (``--service-name``); None for the supervisor."""
    command = process.cmdline()
    return command[command.index("--service-name") + 1] if "--service-name" in command else None


def memory(server) -> dict[str, float]:
    """RSS (MiB) of each process of ``server`` by role: supervisor, API worker N, Encoder <model>."""
    root = psutil.Process(server.process.pid)
    by_role, workers = {}, 0
    for process in [root, *root.children(recursive=True)]:
        service = service_name(process)
        if service == "textbento":
            workers += 1
            label = f"API worker {workers}"
        elif service is None:
            label = "supervisor" if process.pid == root.pid else f"other {process.pid}"
        else:
            label = f"Encoder {service.removeprefix('encoder-') if service != 'encoder' else 'minilm'}"
        by_role[label] = round(process.memory_info().rss / 2**20, 1)
    return {**dict(sorted(by_role.items())), "total": round(sum(by_role.values()), 1)}


async def load(url: str, names: list[str], seconds: float) -> dict[str, dict]:
    """Each of ``names``'s route at c=16, all at once, for ``seconds``: answers/s, p50, p99."""

    def driven(name: str):
        task = MODELS[name][0]
        body = lambda i: {"model": name, **ONE_TEXT[task](TEXTS[i % len(TEXTS)], i)}
        return closed_loop(url + ROUTES[task], body, concurrency=CONCURRENCY, requests=10**9, deadline_s=seconds)

    results = await asyncio.gather(*(driven(name) for name in names))
    return {
        name: {
            "answers_per_s": round(result.statuses.get(200, 0) / result.elapsed_s, 1),
            "errors": result.errors,
            "p50_ms": round(result.percentile_ms(50), 1),
            "p99_ms": round(result.percentile_ms(99), 1),
        }
        for name, result in zip(names, results)
    }


def throughput_round(alone_url: str, several_url: str, seconds: float) -> dict:
    names = list(MODELS)
    runs = {"minilm on the one-model server": asyncio.run(load(alone_url, ["minilm"], seconds))["minilm"]}
    alone = {name: asyncio.run(load(several_url, [name], seconds))[name] for name in names}
    mixed = asyncio.run(load(several_url, names, seconds))
    runs |= {f"{name} alone": alone[name] for name in names} | {f"{name} mixed": mixed[name] for name in names}
    for name, result in runs.items():
        print(f"  {name:35s} {json.dumps(result)}", flush=True)
    reference = runs["minilm on the one-model server"]["answers_per_s"]
    return {
        "runs": runs,
        "mixed_vs_alone": {name: round(mixed[name]["answers_per_s"] / alone[name]["answers_per_s"], 2) for name in names},
        # 1.0: the three share the cores as if time-sliced, nothing gained or lost by running side by side.
        "sum_of_mixed_vs_alone": round(sum(mixed[name]["answers_per_s"] / alone[name]["answers_per_s"] for name in names), 2),
        "minilm_three_model_server_vs_one_model_server": round(alone["minilm"]["answers_per_s"] / reference, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ["BENTOML_HOME"] = str(STORE)  # the imports' store, and the store harness.serving's servers read
    models = stored_models()
    tags = {name: model["tag"] for name, model in models.items()}
    with ExitStack() as servers:
        alone = servers.enter_context(serve(env={"TEXTBENTO_MODEL": tags["minilm"]}))
        several = servers.enter_context(serve(env={"TEXTBENTO_MODELS": ",".join(tags.values())}))
        asyncio.run(load(alone.url, ["minilm"], 5))  # warm-up: every worker tokenizes, every Encoder batches
        asyncio.run(load(several.url, list(MODELS), 5))
        warm = {"minilm alone": memory(alone), "three models": memory(several)}
        rounds = []
        for number in range(args.rounds):
            print(f"round {number + 1}", flush=True)
            rounds.append(throughput_round(alone.url, several.url, args.seconds))
        after = {"minilm alone": memory(alone), "three models": memory(several)}
    workers = lambda rss: [mib for role, mib in rss.items() if role.startswith("API worker")]
    per_tokenizer = (max(workers(warm["three models"])) - max(workers(warm["minilm alone"]))) / (len(MODELS) - 1)
    report = {
        "command": "python -m bench.studies.several_models " + " ".join(sys.argv[1:]),
        "models": models,
        "concurrency": CONCURRENCY,
        "seconds": args.seconds,
        "rss_mib_after_warmup": warm,
        "rss_mib_after_load": after,
        "api_worker_growth_per_extra_tokenizer_mib": round(per_tokenizer, 1),
        "rounds": rounds,
    }
    write_result("several-models.json", report)
    print(json.dumps({k: report[k] for k in ("rss_mib_after_warmup", "rss_mib_after_load", "api_worker_growth_per_extra_tokenizer_mib")}))
    for ratios in rounds:
        print(json.dumps({k: v for k, v in ratios.items() if k != "runs"}))


if __name__ == "__main__":
    main()
