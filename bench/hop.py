"""Where a one-text request's time goes at c=1, against floors with nothing to compute, on this machine.

    python -m bench.hop      # → bench/results/hop.json (~9 min on 2 cores)

Served side by side and measured in turns (``ROUNDS``, medians), each at one request at a time:
textbento (``make serve``'s defaults); BentoML's stack as textbento runs it with no work in it
(``bench/baselines/bentoml_hop.py``): ``Solo`` answers in its endpoint (HTTP in and out), ``Hop`` calls a
batchable dependency in a process of its own (HTTP in, the hop and BentoML's batcher, HTTP out), and
``MountedHop`` makes that call from a mounted FastAPI app's route, as textbento's routes do. Beside
them, in process: a bare round trip between two processes over a Unix socket (asyncio on uvloop, a
length-prefixed request and a 384-float answer: what a hop costs without HTTP), and the served
compute's lone pass (``bench.ceiling.own_speed``). Their differences locate the time: BentoML's HTTP,
BentoML's hop against a bare one, and what textbento adds over the compute.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import uvloop

from bench.compare import load
from harness.results import write_result
from harness.serving import serve

ROUNDS = 4
SECONDS = 8
SOLO, HOP, MOUNTED = "BentoML, one process", "BentoML, the hop to a batchable dependency", "BentoML, the hop from a mounted FastAPI route"
FLOORS = {
    SOLO: "bench.baselines.bentoml_hop:Solo",
    HOP: "bench.baselines.bentoml_hop:Hop",
    MOUNTED: "bench.baselines.bentoml_hop:MountedHop",
}
ANSWER = 384 * 4
# A Unix socket echo server: a 4-byte length, the request, answered by a 4-byte length and ANSWER bytes.
ECHO = f"""
import asyncio, struct, sys, uvloop
async def answer(reader, writer):
    row = struct.pack("<I", {ANSWER}) + bytes({ANSWER})
    try:
        while True:
            (size,) = struct.unpack("<I", await reader.readexactly(4))
            await reader.readexactly(size)
            writer.write(row)
    except asyncio.IncompleteReadError:
        writer.close()
async def main():
    server = await asyncio.start_unix_server(answer, sys.argv[1])
    print("ready", flush=True)
    await server.serve_forever()
uvloop.run(main())
"""


def bare_round_trip_ms(calls: int = 3000) -> float:
    """The median round trip of a 32-byte request and its answer between two processes over a Unix socket."""
    with tempfile.TemporaryDirectory() as directory:
        return round_trip_ms(str(Path(directory, "echo.sock")), calls)


def round_trip_ms(path: str, calls: int) -> float:
    server = subprocess.Popen([sys.executable, "-c", ECHO, path], stdout=subprocess.PIPE, text=True)
    try:
        server.stdout.readline()

        async def run() -> list[float]:
            reader, writer = await asyncio.open_unix_connection(path)
            request, times = struct.pack("<I", 32) + bytes(32), []
            for _ in range(calls):
                started = time.perf_counter()
                writer.write(request)
                (size,) = struct.unpack("<I", await reader.readexactly(4))
                await reader.readexactly(size)
                times.append(time.perf_counter() - started)
            writer.close()
            return times

        return round(statistics.median(uvloop.run(run())[calls // 10 :]) * 1000, 3)
    finally:
        server.kill()
        server.wait()


def main(rounds: int, output: str) -> None:
    from bench.ceiling import bench_tag, loaded, own_speed

    tag = bench_tag()
    model = loaded("auto", tag)
    runs: dict[str, list[dict]] = {"textbento": [], **{name: [] for name in FLOORS}, "model alone": [], "bare round trip": []}
    with ExitStack() as stack:
        servers = {"textbento": stack.enter_context(serve(env={"TEXTBENTO_MODEL": tag}))}
        servers.update({name: stack.enter_context(serve(target)) for name, target in FLOORS.items()})
        for round_ in range(rounds):
            for name, server in list(servers.items())[:: 1 if round_ % 2 == 0 else -1]:
                runs[name].append(load(server.url + "/v1/embeddings", 1, 1, SECONDS, pid=server.process.pid))
            runs["model alone"].append(own_speed(model))
            runs["bare round trip"].append({"round_trip_ms": bare_round_trip_ms()})
            print(f"round {round_ + 1}/{rounds}: " + ", ".join(f"{name} {rows[-1]}" for name, rows in runs.items()), flush=True)
    print(write_result(output, {"model": tag, "rounds": rounds, "seconds_per_point": SECONDS, "runs": runs, **summary(runs)}))


def summary(runs: dict[str, list[dict]]) -> dict:
    """The medians of the rounds, and what each layer adds at c=1 (ms) by their differences."""
    servers = ("textbento", *FLOORS)
    p50 = {name: round(statistics.median(row["p50_ms"] for row in runs[name]), 2) for name in servers}
    cpu = {
        name: {
            part: round(statistics.median(row["cpu_ms_per_request_by_part"][part] for row in runs[name]), 2)
            for part in runs[name][0]["cpu_ms_per_request_by_part"]
        }
        for name in servers
    }
    solo, hop, mounted = p50[SOLO], p50[HOP], p50[MOUNTED]
    lone_pass = round(statistics.median(row["alone_pass_ms"] for row in runs["model alone"]), 2)
    bare = round(statistics.median(row["round_trip_ms"] for row in runs["bare round trip"]), 3)
    return {
        "p50_ms": p50,
        "cpu_ms_per_request_by_part": cpu,
        "lone_pass_ms": lone_pass,
        "bare_round_trip_ms": bare,
        "where_the_time_goes_ms": {
            "BentoML's HTTP in and out (one process, nothing computed)": solo,
            "BentoML's hop and batcher, over one process": round(hop - solo, 2),
            "a bare round trip between two processes": bare,
            "a mounted FastAPI route, over BentoML's own": round(mounted - hop, 2),
            "textbento over its lone pass": round(p50["textbento"] - lone_pass, 2),
            "textbento over its lone pass and BentoML's one-process floor": round(p50["textbento"] - lone_pass - solo, 2),
            "textbento over its lone pass and the mounted hop's floor": round(p50["textbento"] - lone_pass - mounted, 2),
        },
        "cpu_ms_per_call_of_the_hop": round(sum(cpu[HOP].values()) - sum(cpu[SOLO].values()), 2),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--output", default="hop.json", help="the result file's name in bench/results/")
    arguments = parser.parse_args()
    main(arguments.rounds, arguments.output)
