"""``bulk.embed`` measured on this machine: its speed against the server's and fastembed's, its memory, its resume.

    make bench-bulk      # → bench/results/bulk.json (~15 min; the first run installs fastembed, ~1 min)

On the benchmark model and the load's short texts: a corpus of 200,000 texts through ``python -m bulk.embed``
(texts/s, peak RSS) against the server's best 32 texts/request × c=8 (``bench.compare.measure``); the same
corpus SIGKILLed once half its rows are written, then resumed (time to its first new part, every id once);
fastembed (its own virtualenv under ``build/peers/``) on the first 20,000 texts with the same stored graphs,
loaded offline as a custom model (``FASTEMBED``), against ``bulk.embed`` on those 20,000.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import bentoml
import pyarrow.dataset as ds

from bench.compare import better, measure
from harness.results import write_result
from harness.serving import ROOT
from harness.texts import short_texts

BUILD = ROOT / "build" / "bulk"
VENV = ROOT / "build" / "peers" / "fastembed-venv"
FASTEMBED = "fastembed==0.9.1"
CORPUS_TEXTS, FASTEMBED_TEXTS = 200_000, 20_000
# Run in fastembed's virtualenv: the stored model directory as a custom model, ``sys.argv``: directory, graph, texts file.
FASTEMBED_RUN = """
import json, sys, time
from fastembed import TextEmbedding
from fastembed.common.model_description import ModelSource, PoolingType
directory, graph, texts = sys.argv[1], sys.argv[2], [json.loads(line)["text"] for line in open(sys.argv[3])]
TextEmbedding.add_custom_model(model="local/" + graph, pooling=PoolingType.MEAN, normalization=True,
                               sources=ModelSource(hf="local/" + graph), dim=384, model_file="onnx/" + graph)
model = TextEmbedding(model_name="local/" + graph, specific_model_path=directory)
list(model.embed(texts[:256], batch_size=256))
started = time.perf_counter()
count = sum(1 for _ in model.embed(texts, batch_size=256))
print(json.dumps({"texts": count, "texts_per_s": round(count / (time.perf_counter() - started), 1)}))
"""


def corpus(path: Path, count: int) -> Path:
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"id": f"t{i}", "text": text}) + "\n" for i, text in enumerate(short_texts(count, seed=7))))
    return path


def bulk(tag: str, source: Path, output: Path, *extra: str) -> subprocess.Popen:
    """``bulk.embed`` in a process of its own, its progress bar into a log beside the output (a pipe nobody reads would stall it)."""
    command = [sys.executable, "-m", "bulk.embed", "--model", tag, "--input", str(source), "--id-field", "id", "--output", str(output)]
    with open(output.with_suffix(".log"), "a") as log:
        return subprocess.Popen([*command, *extra], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)


def finished(output: Path, process: subprocess.Popen) -> dict:
    if process.wait():
        raise RuntimeError(f"bulk.embed failed ({process.returncode}): {output.with_suffix('.log').read_text()[-2000:]}")
    return json.loads((output / "manifest.json").read_text())["summary"]


def rows_done(output: Path) -> int:
    try:
        parts = json.loads((output / "manifest.json").read_text())["parts"]
    except (OSError, ValueError, KeyError):
        return 0
    return parts[-1]["input_rows"][1] if parts else 0


def resident_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def whole_run(tag: str, source: Path, count: int) -> dict:
    """The corpus in one run: texts/s, the child's peak RSS, and its RSS as each tenth of the rows is done."""
    output = BUILD / "out-whole"
    subprocess.run(["rm", "-rf", str(output)], check=True)
    process, by_tenth = bulk(tag, source, output), {}
    while process.poll() is None:
        tenth = rows_done(output) * 10 // count
        if tenth and tenth not in by_tenth:
            by_tenth[tenth] = round(resident_mib(process.pid))
        time.sleep(0.2)
    summary = finished(output, process)
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child so far: this one
    rss = [mib for _, mib in sorted(by_tenth.items())]
    return {
        **summary,
        "peak_rss_mib": round(peak_mib),
        "rss_mib_by_tenth_done": {f"{tenth * 10}%": mib for tenth, mib in sorted(by_tenth.items())},
        "rss_spread_after_10_percent": round(max(rss) / min(rss) - 1, 3) if rss else None,
        # what flat means: no growth past the first tenth (the last sample can fall, as the job ends and frees)
        "rss_growth_after_10_percent": round(max(rss) / rss[0] - 1, 3) if rss else None,
    }


def resumed_run(tag: str, source: Path, count: int) -> dict:
    """Killed at half the rows, then the same command again: time to its first new part, and the output whole."""
    output = BUILD / "out-resumed"
    subprocess.run(["rm", "-rf", str(output)], check=True)
    first = bulk(tag, source, output)
    while rows_done(output) < count // 2:
        if first.poll() is not None:
            raise RuntimeError("bulk.embed ended before half its rows")
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed_at = rows_done(output)
    started = time.perf_counter()
    second = bulk(tag, source, output)
    while rows_done(output) == killed_at and second.poll() is None:
        time.sleep(0.02)
    first_part_s = time.perf_counter() - started
    summary = finished(output, second)
    ids = ds.dataset(sorted(output.glob("part-*.parquet")), format="parquet").to_table(columns=["id"])["id"].to_pylist()
    return {
        "killed_after_rows": killed_at,
        "restart_to_first_new_part_s": round(first_part_s, 2),
        "second_run_s": summary["seconds"],
        "ids_once_each": len(ids) == count and len(set(ids)) == count,
        "partial_files_left": sorted(path.name for path in output.glob(".*.partial")),
    }


def fastembed(model_dir: Path, texts_file: Path) -> dict:
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", FASTEMBED], check=True)
    runs = {}
    for graph in ("model.onnx", "model-int8.onnx"):
        result = subprocess.run([str(python), "-c", FASTEMBED_RUN, str(model_dir), graph, str(texts_file)], check=True, capture_output=True)
        runs[graph] = json.loads(result.stdout.decode().strip().splitlines()[-1])
    return runs


def main() -> None:
    from bench.ceiling import bench_tag

    tag = bench_tag()
    stored = bentoml.models.get(tag)
    source = corpus(BUILD / f"corpus-{CORPUS_TEXTS}.jsonl", CORPUS_TEXTS)
    head = BUILD / f"corpus-{FASTEMBED_TEXTS}.jsonl"
    head.write_text("".join(source.read_text().splitlines(keepends=True)[:FASTEMBED_TEXTS]))
    report: dict = {"model": tag, "texts": "harness.texts.short_texts (5-30 words), seed 7"}
    report["whole"] = whole_run(tag, source, CORPUS_TEXTS)
    print("whole", report["whole"], flush=True)
    report["resumed"] = resumed_run(tag, source, CORPUS_TEXTS)
    print("resumed", report["resumed"], flush=True)
    output = BUILD / "out-head"
    subprocess.run(["rm", "-rf", str(output)], check=True)
    report["bulk_20k"] = finished(output, bulk(tag, head, output))
    report["fastembed_20k"] = {"package": FASTEMBED, **fastembed(Path(stored.path), head)}
    print("20k", report["bulk_20k"]["texts_per_s"], report["fastembed_20k"], flush=True)
    best: dict = {}
    for _ in range(3):
        best = better(best or None, measure(ROOT, tag, 8, [(32, 8)])["32x-c8"])
    report["server_32x_c8"] = best
    report["bulk_over_server"] = round(report["whole"]["texts_per_s"] / best["texts_per_s"], 2)
    print(write_result("bulk.json", report))


if __name__ == "__main__":
    main()
