"""Goodput under impatient load: answers that arrive in time, this tree against REF, served in turns.

    python -m bench.studies.goodput [--ref d507f78] [--seconds 15]   # → bench/results/goodput.json

Per tree (the embedded MiniLM imported by the tree's own CLI; default settings):

- capacity: one-text requests at c=64, no client timeout: answers/s;
- the probe: 1,500 one-text requests at c=128, each given up after 0.25 s: the texts the Encoder
  computed (``textbento_batch_texts_sum``) and how long it kept computing after the last client left;
- goodput: Poisson arrivals of one-text requests at 1×, 2× and 4× the capacity for ``seconds`` s,
  each client waiting 1 s and then trying once more (at once), and announcing its patience as the
  OpenAI SDKs do (``x-stainless-read-timeout: 1``): answers that arrived in time per second, as a
  share of the capacity; how long the Encoder stayed busy after the clients stopped; and the CPU
  (cores) the load generator and the server took meanwhile.

The load generator shares the machine's cores with the server, as every bench here does; at 4× it
sends four times the requests, and the CPU it takes is the server's no more (``client_cores``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import resource
import time
from pathlib import Path

import aiohttp
import bentoml
import psutil
import requests

from bench import write_result
from bench.compare import import_default, worktree
from harness.load import closed_loop
from harness.serving import ROOT, serve

LOADS = (1, 2, 4)  # offered load, × capacity
PATIENCE_S = 1.0
ANNOUNCED = {"x-stainless-read-timeout": str(PATIENCE_S)}


def computed(url: str) -> float:
    """Texts the Encoder has run through forward passes so far."""
    text = requests.get(f"{url}/metrics", timeout=30).text
    return sum(float(value) for value in re.findall(r"^textbento_batch_texts_sum\{[^}]*\} (\S+)$", text, re.M))


def busy_after(url: str, ended: float, quiet_s: float = 1.5, longest_s: float = 60) -> float:
    """Seconds from ``ended`` to the Encoder's last forward pass (polled until ``quiet_s`` without one)."""
    last, changed = computed(url), ended
    while time.time() - changed < quiet_s and time.time() - ended < longest_s:
        time.sleep(0.1)
        if (now := computed(url)) != last:
            last, changed = now, time.time()
    return round(max(0.0, changed - ended), 2)


def capacity(url: str, seconds: float) -> float:
    result = asyncio.run(
        closed_loop(f"{url}/v1/embeddings", lambda i: {"input": f"capacity {i}"}, concurrency=64, requests=10**6, deadline_s=seconds)
    )
    return result.statuses[200] / result.elapsed_s


def probe(url: str) -> dict:
    """Issue 21's probe: what is computed for clients that gave up after 0.25 s."""
    before = computed(url)
    result = asyncio.run(
        closed_loop(
            f"{url}/v1/embeddings", lambda i: {"input": f"probe {i} " * 3}, concurrency=128, requests=1500, deadline_s=120, timeout_s=0.25
        )
    )
    ended = time.time()
    busy = busy_after(url, ended)
    return {"answered_in_time": result.statuses[200], "texts_computed": computed(url) - before, "busy_after_s": busy}


async def impatient_load(url: str, rate: float, seconds: float) -> tuple[int, int]:
    """Poisson arrivals at ``rate``/s for ``seconds`` s; each client waits ``PATIENCE_S``, then tries once more.
    (requests sent, answers in time)."""
    answered = 0

    async def client(session: aiohttp.ClientSession, index: int) -> None:
        nonlocal answered
        for attempt in range(2):
            try:
                timeout = aiohttp.ClientTimeout(total=PATIENCE_S)
                body = {"input": f"goodput {index}.{attempt}"}
                async with session.post(f"{url}/v1/embeddings", json=body, headers=ANNOUNCED, timeout=timeout) as answer:
                    await answer.read()
                    if answer.status == 200:
                        answered += 1
                        return
            except (TimeoutError, aiohttp.ClientError):
                pass

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        clients, started, index = [], time.perf_counter(), 0
        arrival = started
        while arrival - started < seconds:
            arrival += random.expovariate(rate)
            await asyncio.sleep(max(0.0, arrival - time.perf_counter()))
            clients.append(asyncio.create_task(client(session, index)))
            index += 1
        await asyncio.gather(*clients)
    return index, answered


def cpu_seconds(server) -> tuple[float, float]:
    """CPU seconds so far of this process (the load generator) and of the server's process tree."""
    mine = resource.getrusage(resource.RUSAGE_SELF)
    tree = [psutil.Process(server.process.pid), *psutil.Process(server.process.pid).children(recursive=True)]
    return mine.ru_utime + mine.ru_stime, sum(sum(p.cpu_times()[:2]) for p in tree)


def goodput(server, rate: float, seconds: float) -> dict:
    (client_before, server_before), started = cpu_seconds(server), time.time()
    sent, answered = asyncio.run(impatient_load(server.url, rate, seconds))
    (client_after, server_after), ended = cpu_seconds(server), time.time()
    return {
        "offered_per_s": round(rate, 1),
        "sent": sent,
        "answered_in_time_per_s": round(answered / seconds, 1),
        "busy_after_s": busy_after(server.url, ended),
        "client_cores": round((client_after - client_before) / (ended - started), 2),
        "server_cores": round((server_after - server_before) / (ended - started), 2),
    }


def measure(tree: Path, tag: str, seconds: float) -> dict:
    with serve(env={"TEXTBENTO_MODEL": tag}, cwd=tree) as server:
        capacity(server.url, 3)  # warm-up
        rate = capacity(server.url, seconds)
        report = {"capacity_per_s": round(rate, 1), "probe": probe(server.url), "goodput": {}}
        for load in LOADS:
            row = goodput(server, load * rate, seconds)
            row["share_of_capacity"] = round(row["answered_in_time_per_s"] / rate, 2)
            report["goodput"][f"{load}x"] = row
            print(tree.name, f"{load}x", row, flush=True)
        return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ref", default="d507f78", help="the tree before the drop of work for gone clients")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--out", default="goodput.json", help="result file (bench/results/ unless a path)")
    args = parser.parse_args()
    tags: list[str] = []
    with worktree(args.ref) as ref_tree:
        try:
            trees = {
                "this tree": (ROOT, import_default(ROOT, "goodput-this")),
                args.ref: (ref_tree, import_default(ref_tree, "goodput-ref")),
            }
            tags = [tag for _, tag in trees.values()]
            report = {name: measure(tree, tag, args.seconds) for name, (tree, tag) in trees.items()}
        finally:
            for tag in tags:  # ~270 MB each
                bentoml.models.delete(tag)
    admission = os.environ.get("TEXTBENTO_MAX_CONCURRENCY", "default")
    write_result(
        args.out, {"ref": args.ref, "seconds": args.seconds, "patience_s": PATIENCE_S, "max_concurrency": admission, "trees": report}
    )
    for name, row in report.items():
        print(name, row["capacity_per_s"], row["probe"], {load: r["share_of_capacity"] for load, r in row["goodput"].items()})


if __name__ == "__main__":
    main()
