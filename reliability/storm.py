"""Disconnect storm: clients that give up at any moment, on every route, and nothing held afterwards.

    python -m reliability.storm [--requests 10000] [--concurrency 64]    # bench/results/storm.json; exit 1 on failure

An embedder (the embedded all-MiniLM-L6-v2), a reranker, a classifier and a SPLADE model
(random-weight test models, built offline) are served together. Requests of one text or 32 go to
every route of their model's task, each naming its model; every client gives up after a random
1-500 ms, and one in ten sends its headers and part of its body, then drops the TCP connection.
Afterwards (``check``):

- the work each stage holds (``textbento_held``: the coalescers, the forgetters, the inference
  threads, asyncio tasks, the clients' connections) and the requests in progress (BentoML's gauge
  and textbento's) are back to their idle level within ``SETTLE_S``;
- the RSS of every process is at most 5% above where it stood after the warm-up (which includes a storm
  a tenth the size, so that what grows is what leaks, not arenas reaching their working size); memory
  handed back to the system is no leak, so a process may end below it;
- once the idle pooled connections to the Encoders have expired (``POOLS_IDLE_S``), those are back to
  their idle level and no process holds more open file descriptors than after the warm-up;
- the next 1,000 requests are all answered 200.

``tests/test_storm.py`` runs a short storm of the same kinds on every test run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import aiohttp
import psutil
import requests

from harness.results import write_result
from harness.serving import Server, role, serve
from harness.texts import short_texts

SETTLE_S = 5.0
# Idle keep-alive connections from the API workers to the Encoders (an open file on both ends) outlive
# the storm by design: aiohttp's pool (BentoML's client) sweeps every 15 s the ones idle 15 s, so one
# lives up to 30 s.
POOLS_IDLE_S = 32.0
POOLED = "encoder_connections"
RSS_TOLERANCE = 0.05
# Per task, each route's body for a list of texts (``model`` added by ``body``).
ROUTES = {
    "embed": {
        "/v1/embeddings": lambda texts: {"input": texts},
        "/embed": lambda texts: {"inputs": texts},
        "/similarity": lambda texts: {"inputs": {"source_sentence": texts[0], "sentences": texts}},
        "/tokenize": lambda texts: {"inputs": texts},
    },
    "rerank": {
        "/v1/rerank": lambda texts: {"query": "which of these is relevant", "documents": texts},
        "/rerank": lambda texts: {"query": "which of these is relevant", "texts": texts},
    },
    "classify": {
        "/v1/classify": lambda texts: {"inputs": texts},
        "/predict": lambda texts: {"inputs": texts[0] if len(texts) == 1 else [[text] for text in texts]},
        "/api/v1/sentiment": lambda texts: {"text": texts[0]},
    },
    "sparse": {"/embed_sparse": lambda texts: {"inputs": texts}},
}
# Gauges read off /metrics: what must be back to its idle level.
GAUGES = re.compile(r"^(textbento_held\{[^}]*\}|textbento_inflight_requests|bentoml_service_request_in_progress\{[^}]*\}) (\S+)$")


def body(rng: random.Random, models: dict[str, str], texts: list[str]) -> tuple[str, dict]:
    """A route and its body: one text (two in three) or 32, for a model picked at random."""
    task = rng.choice(sorted(models))
    path, make = rng.choice(sorted(ROUTES[task].items()))
    chosen = rng.sample(texts, 32) if rng.random() < 1 / 3 else [rng.choice(texts)]
    return path, {**make(chosen), "model": models[task]}


async def give_up(session: aiohttp.ClientSession, url: str, payload: dict, after_s: float) -> str:
    """POST, then leave after ``after_s`` whatever the state of the exchange; the outcome seen."""
    try:
        async with asyncio.timeout(after_s):
            async with session.post(url, json=payload) as response:
                await response.read()
                return str(response.status)
    except TimeoutError:
        return "gave up"
    except aiohttp.ClientError as error:
        return type(error).__name__


async def drop_mid_body(url: str, payload: dict, rng: random.Random) -> str:
    """Headers and part of the body over a raw socket, then the connection dropped."""
    address = urlparse(url)
    data = json.dumps(payload).encode()
    head = (
        f"POST {address.path} HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode()
    _, writer = await asyncio.open_connection(address.hostname, address.port)
    writer.write(head + data[: rng.randrange(len(data))])
    await writer.drain()
    await asyncio.sleep(rng.uniform(0.001, 0.5))
    writer.transport.abort()  # a reset, not a polite close
    return "dropped mid-body"


async def storm(base_url: str, models: dict[str, str], *, count: int, concurrency: int, seed: int = 0) -> Counter:
    """``count`` requests, ``concurrency`` at a time, each given up or dropped; the outcomes counted."""
    rng, texts, outcomes = random.Random(seed), short_texts(512), Counter()
    jobs = iter(range(count))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client() -> None:
            for _ in jobs:
                path, payload = body(rng, models, texts)
                if rng.random() < 0.1:
                    outcome = await drop_mid_body(base_url + path, payload, rng)
                else:
                    outcome = await give_up(session, base_url + path, payload, rng.uniform(0.001, 0.5))
                outcomes[outcome] += 1

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return outcomes


async def patient(base_url: str, models: dict[str, str], *, count: int, concurrency: int = 16, seed: int = 1) -> Counter:
    """``count`` ordinary requests of the same kinds, waited for; their statuses counted."""
    rng, texts, statuses = random.Random(seed), short_texts(512), Counter()
    jobs = iter(range(count))
    async with aiohttp.ClientSession() as session:

        async def client() -> None:
            for _ in jobs:
                path, payload = body(rng, models, texts)
                async with session.post(base_url + path, json=payload) as response:
                    await response.read()
                    statuses[str(response.status)] += 1

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return statuses


def bad_inputs(base_url: str) -> Counter:
    """A round of bad requests (the kinds of tests/test_bad_input.py), each answered 4xx: their statuses."""
    url, json_type = f"{base_url}/v1/embeddings", {"content-type": "application/json"}
    sent = [
        requests.post(url, data=b'{"input": ', headers=json_type, timeout=30),
        requests.post(url, json={"input": 42}, timeout=30),
        requests.post(url, json={"input": "x", "model": "gpt-4"}, timeout=30),
        requests.post(url, data=b'{"input": "x"}', headers={"content-type": "text/plain"}, timeout=30),
        requests.post(url, data=b'{"input": "' + b"a" * (9 * 2**20) + b'"}', headers=json_type, timeout=30),
        requests.post(url, data=(b"a" * 2**20 for _ in range(9)), headers=json_type, timeout=30),  # chunked, over the limit
    ]
    return Counter(str(response.status_code) for response in sent)


# Not the storm's: the /metrics request reading the gauges, and BentoML's health probes, which the
# storm never sends (a probe sent while a model starts is in progress for up to 5 s, its Encoder's probe).
NOT_THE_STORMS = ('endpoint="/metrics"', 'endpoint="/readyz"', 'endpoint="/livez"')


def gauges(base_url: str) -> dict[str, float]:
    """Every held-work gauge of the server (``NOT_THE_STORMS`` left out)."""
    text = requests.get(f"{base_url}/metrics", timeout=10).text
    found = {}
    for line in text.splitlines():
        if (match := GAUGES.match(line)) and not any(probe in line for probe in NOT_THE_STORMS):
            found[match[1]] = float(match[2])
    return found


def idle_levels(base_url: str) -> dict[str, float]:
    """What a server holds at rest (its tasks, pooled connections): requests in progress are 0 at rest, not read here."""
    return {name: value for name, value in gauges(base_url).items() if name.startswith("textbento_held")}


def processes(server: Server) -> dict[str, tuple[float, int]]:
    """Per process of the server (by role and pid): (RSS MiB, open file descriptors)."""
    root = psutil.Process(server.process.pid)
    return {
        f"{role(' '.join(p.cmdline()))} {p.pid}": (p.memory_info().rss / 2**20, p.num_fds()) for p in [root, *root.children(recursive=True)]
    }


def settled(base_url: str, idle: dict[str, float], within_s: float, pooled: bool = False) -> tuple[float | None, dict[str, float]]:
    """Seconds until every gauge (the pooled connections only when ``pooled``) is at or under its idle
    level (None: not within ``within_s``), and the last reading."""
    started = time.monotonic()
    while True:
        now = {name: value for name, value in gauges(base_url).items() if pooled or POOLED not in name}
        over = {name: value for name, value in now.items() if value > idle.get(name, 0.0)}
        if not over:
            return round(time.monotonic() - started, 2), now
        if time.monotonic() - started > within_s:
            return None, over
        time.sleep(0.25)


def check(
    server: Server,
    models: dict[str, str],
    *,
    count: int,
    concurrency: int,
    after: int = 1000,
    pools_idle_s: float | None = POOLS_IDLE_S,
    rss_tolerance: float | None = RSS_TOLERANCE,
) -> dict:
    """The storm against a running server, then every check of the module's docstring (the pooled
    connections and open files only when ``pools_idle_s``, RSS only when ``rss_tolerance``); the report."""
    # Every route, bad inputs, and a first storm: connections, pools and memory arenas at their working size.
    warm_up = asyncio.run(patient(server.url, models, count=200)) + bad_inputs(server.url)
    warm_up += asyncio.run(storm(server.url, models, count=count // 10, concurrency=concurrency, seed=1))
    time.sleep(2.5)  # two samples of textbento_held
    idle, before = idle_levels(server.url), processes(server)
    started = time.monotonic()
    outcomes = asyncio.run(storm(server.url, models, count=count, concurrency=concurrency))
    seconds = round(time.monotonic() - started, 1)
    time.sleep(1.5)  # the next sample of textbento_held
    settle_s, last = settled(server.url, idle, SETTLE_S)
    after_storm = processes(server)
    rss = {name: round(after_storm[name][0] / rss_mib - 1, 4) for name, (rss_mib, _) in before.items() if name in after_storm}
    pools_settled, pooled, fds = 0.0, {}, {}
    if pools_idle_s is not None:
        time.sleep(pools_idle_s)
        pools_settled, pooled = settled(server.url, idle, 0, pooled=True)
        after_idle = processes(server)
        fds = {name: (start, after_idle[name][1]) for name, (_, start) in before.items() if name in after_idle}
    statuses = asyncio.run(patient(server.url, models, count=after))
    failures = []
    if settle_s is None:
        failures.append(f"still held {SETTLE_S} s after the storm: {last}")
    if pools_settled is None:
        failures.append(f"pooled connections still open {pools_idle_s} s after the storm: {pooled}")
    if set(before) != set(after_storm):
        failures.append(f"processes changed: {sorted(before)} → {sorted(after_storm)}")
    if rss_tolerance is not None:
        failures += [f"{name}: RSS {growth:+.1%}" for name, growth in rss.items() if growth > rss_tolerance]
    failures += [f"{name}: {start} → {end} open files" for name, (start, end) in fds.items() if end > start]
    if set(statuses) != {"200"}:
        failures.append(f"the {after} requests after it: {dict(statuses)}")
    return {
        "requests": count,
        "concurrency": concurrency,
        "seconds": seconds,
        "warm_up": dict(warm_up),
        "outcomes": dict(outcomes),
        "settled_s": settle_s,
        "idle_gauges": idle,
        "after_gauges": last,
        "pooled_connections": {
            "idle": idle.get(f'textbento_held{{stage="{POOLED}"}}'),
            "after_idle": pooled.get(f'textbento_held{{stage="{POOLED}"}}'),
        },
        "rss_mib_before": {name: round(rss_mib, 1) for name, (rss_mib, _) in before.items()},
        "rss_change": rss,
        "open_files": fds,
        "after": dict(statuses),
        "failures": failures,
        "passed": not failures,
    }


def import_test_models(directory: Path) -> dict[str, str]:
    """The four test models in the store (BENTOML_HOME): task → tag."""
    import subprocess

    from transformers import BertForMaskedLM

    from harness.testmodels import build_bert_classifier, build_classifier, build_splade, build_tiny_bert

    build_splade(directory / "splade", build_tiny_bert(directory / "mlm", BertForMaskedLM))
    sources = {
        "embed": [],  # the embedded all-MiniLM-L6-v2
        "rerank": ["--path", str(build_bert_classifier(directory / "rerank", num_labels=1))],
        "classify": ["--path", str(build_classifier(directory / "classify"))],
        "sparse": ["--path", str(directory / "splade")],
    }
    tags = {}
    for task, source in sources.items():
        command = [sys.executable, "-m", "train_import.import_model", *source, "--name", f"storm-{task}"]
        tags[task] = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()
    return tags


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--out", default="storm.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="storm-models-") as directory:
        models = import_test_models(Path(directory))
    with serve(env={"TEXTBENTO_MODELS": ",".join(models.values())}) as server:
        report = check(server, {task: tag.split(":")[0] for task, tag in models.items()}, count=args.requests, concurrency=args.concurrency)
    path = write_result(args.out, report)
    print(json.dumps({key: report[key] for key in ("seconds", "outcomes", "settled_s", "rss_change", "open_files", "after", "failures")}))
    print(f"{'passed' if report['passed'] else 'FAILED'}: {path}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
