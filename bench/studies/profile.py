"""Where the request path spends its CPU: milliseconds of CPU per request, per process and kind of work.

    python -m bench.studies.profile [--texts-per-request 1] [--concurrency 64] [--seconds 20]
        → bench/results/profile-<texts>x-c<concurrency>.json (+ .txt, ms of CPU per request by process and work)

Serves the default model (``bench.ceiling.bench_tag``), drives requests of the given size at
the given concurrency, and meanwhile records every process of the server with
``py-spy --subprocesses``; frames of threads that only wait are left out. Each process
is named by its role (API worker, Encoder, supervisor); each sample's innermost frame of our own
code or of a library is charged to a bucket (``BUCKETS``), so the table reads as "share of the
busy CPU of the whole service per kind of work". A first phase without py-spy measures the CPU
per request of every process (``harness.serving.cpu_seconds``), split among its kinds of work in
proportion to their samples: milliseconds of CPU per request (and per text). Threads outside
Python (ONNX Runtime's pool, the tokenizers') are not sampled, so their time is spread over their
process's rows: the model's row is a floor, the others a ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from bench import RESULTS, write_result
from harness.load import closed_loop
from harness.serving import cpu_ms_per, cpu_seconds, role, serve
from harness.texts import short_texts

PY_SPY = str(Path(sys.executable).with_name("py-spy"))
# Innermost frames of threads that wait: py-spy's idle detection misses them in --nonblocking mode.
# Under uvloop the loop's own C code, its epoll wait included, shows as ``Runner.run``: left out
# too, so the event loop's share counts only the Python callbacks it runs.
WAITING = re.compile(
    r"EpollSelector\.select|Condition\.wait|_worker \(concurrent/futures/thread\.py|Event\.wait|SimpleQueue\.get|Queue\.get"
    r"|Runner\.run \(asyncio/runners\.py"
)
# The first matching pattern (over the whole stack, innermost frames first) names the work.
BUCKETS = [
    ("model forward (onnxruntime)", r"onnxruntime|models/backends/"),
    ("tokenization", r"tokenizers|tokenization\.py"),
    ("JSON response encoding", r"json|orjson|jsonable_encoder|serialize_response|render"),
    ("request validation (pydantic)", r"pydantic|api/types\.py"),
    ("inter-service call (client: aiohttp, pickle)", r"_bentoml_impl/client|aiohttp|pickle"),
    ("BentoML batcher / runner server", r"marshal/dispatcher|_bentoml_impl/server|bentoml/_internal/server"),
    ("metrics and tracing", r"prometheus|opentelemetry|metrics"),
    ("HTTP server (uvicorn, h11, starlette, FastAPI routing)", r"uvicorn|h11|httptools|starlette|fastapi|anyio"),
    ("asyncio event loop", r"asyncio|uvloop"),
]


def bucket(stack: str) -> str:
    frames = stack.split(";")[::-1]  # innermost first
    for frame in frames:
        for name, pattern in BUCKETS:
            if re.search(pattern, frame):
                return name
    return "other Python"


def summarise(raw: str) -> dict:
    """py-spy's raw (collapsed) stacks → samples per role and per bucket."""
    per_role: Counter = Counter()
    per_bucket: Counter = Counter()
    per_role_bucket: Counter = Counter()
    per_function: Counter = Counter()  # innermost frame: where the CPU actually was
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if WAITING.search(frames[-1]):
            continue
        processes = [frame for frame in frames if frame.startswith("process ")]
        who = role(processes[-1])  # py-spy's innermost ``process <pid>:"<command line>"`` frame
        what = bucket(";".join(frames[len(processes) :]))
        per_function[f"{who}: {frames[-1]}"] += int(count)
        per_role[who] += int(count)
        per_bucket[what] += int(count)
        per_role_bucket[f"{who}: {what}"] += int(count)
    total = sum(per_bucket.values()) or 1
    share = lambda counter: {k: round(v / total, 3) for k, v in counter.most_common()}
    top = {k: round(v / total, 3) for k, v in per_function.most_common(25)}
    return {
        "samples": total,
        "samples_by_role": dict(per_role),
        "samples_by_role_and_work": dict(per_role_bucket),
        "by_role": share(per_role),
        "by_work": share(per_bucket),
        "by_role_and_work": share(per_role_bucket),
        "top_innermost_frames": top,
    }


def main() -> None:
    from bench.ceiling import bench_tag

    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--texts-per-request", type=int, default=1)
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    texts, per_request = short_texts(2048), args.texts_per_request
    body = lambda i: {"input": [texts[(i * per_request + j) % len(texts)] for j in range(per_request)]}
    raw_path = RESULTS / "profile.raw"
    RESULTS.mkdir(exist_ok=True)
    with serve(env={"TEXTBENTO_MODEL": bench_tag()}) as server:
        url = server.url + "/v1/embeddings"
        asyncio.run(closed_loop(url, body, concurrency=args.concurrency, requests=10**6, deadline_s=3, texts_per_request=per_request))
        before = cpu_seconds(server.process.pid)
        measured = asyncio.run(
            closed_loop(url, body, concurrency=args.concurrency, requests=10**6, deadline_s=args.seconds, texts_per_request=per_request)
        )
        cpu_ms = cpu_ms_per(before, cpu_seconds(server.process.pid), measured.statuses[200])
        # Load while py-spy samples; its figures are the phase's above.
        load = closed_loop(
            url, body, concurrency=args.concurrency, requests=10**6, deadline_s=args.seconds + 4, texts_per_request=per_request
        )
        driver = threading.Thread(target=asyncio.run, args=(load,))
        driver.start()
        subprocess.run(
            [
                PY_SPY,
                "record",
                "--pid",
                str(server.process.pid),
                "--subprocesses",
                "--nonblocking",
                "--format",
                "raw",
                "--rate",
                "100",
                "--duration",
                str(args.seconds),
                "--output",
                str(raw_path),
            ],
            check=True,
            capture_output=True,
        )
        driver.join()
    shares = summarise(raw_path.read_text())
    total_ms = sum(cpu_ms.values())
    summary = {
        "load": {"concurrency": args.concurrency, "texts_per_request": per_request, **measured.summary()},
        "cpu_ms_per_request": round(total_ms, 3),
        "cpu_ms_per_request_by_role": cpu_ms,
        "cpu_ms_per_request_by_role_and_work": {
            work: round(cpu_ms.get(who, 0.0) * samples / shares["samples_by_role"][who], 3)
            for work, samples in shares["samples_by_role_and_work"].items()
            if (who := work.split(": ")[0]) in shares["samples_by_role"]
        },
        **shares,
    }
    raw_path.unlink()
    name = f"profile-{per_request}x-c{args.concurrency}"
    write_result(f"{name}.json", summary, indent=2)
    per_text = lambda ms: f"  {ms / per_request:6.3f} ms/text" if per_request > 1 else ""
    costs = sorted(summary["cpu_ms_per_request_by_role_and_work"].items(), key=lambda item: -item[1])
    lines = [f"{ms:6.3f} ms/request{per_text(ms)}  {work}" for work, ms in costs]
    lines.append(f"{total_ms:6.3f} ms/request{per_text(total_ms)}  all processes")
    (RESULTS / f"{name}.txt").write_text("\n".join(lines) + "\n")
    print(json.dumps(summary["load"]), *lines, sep="\n")


if __name__ == "__main__":
    main()
