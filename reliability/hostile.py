"""Hostile clients: what no client, header, body or text may do to the server or to the other clients.

    python -m reliability.hostile [--scale 1.0] [--out hostile.json]    # bench/results/hostile.json; exit 1 on failure

The real ``bentoml serve`` of ``text-model:latest`` (``make serve``'s), with an API key
(``TEXTBENTO_API_KEYS``), a 5 s header deadline and, where the setting exists, a 10 s body deadline
(``TEXTBENTO_BODY_TIMEOUT_S``). Then, in turn (``PHASES``), each bounded in count and time:

- ``unknown_paths``: 3,000 requests on ``/zz-<random>`` (and under the protected prefixes) without
  a key, with every method and some odd ones;
- ``slow_bodies``: 1,200 uploads that send their headers (``content-length: 8000000``) and one byte,
  then stall, and 300 that send a byte a second; meanwhile 20 ordinary requests must be answered 200
  within 5 s, and every slow upload must be closed by the server (its body deadline, plus ``GRACE_S``);
- ``big_uploads``: 64 uploads at once of 7.9 MB of an 8,000,000-byte body (``Connection: close``), held unfinished
  for ``HOLD_S``: those past the API workers' body budget (``TEXTBENTO_BODY_BUDGET_BYTES``) get 503 ``body_budget``
  as their bytes arrive (read, not reset), and the server's RSS grows by at most the workers' budgets (+ ``RSS_SLACK``) meanwhile;
- ``oversized_headers``: a 60 KB ``Authorization``, 2,000 headers, a 60 KB path, a 1 MiB cookie;
- ``tiny_texts``: on every route, a body of 1.5 million one-character texts (each answered 4xx
  within ``QUICK_S``), ordinary requests answered 200 meanwhile;
- ``tokenize_flood``: 4 concurrent ``/tokenize`` bodies of 256 texts of 19,000 characters (no 5xx,
  RSS at most ``PEAK_RSS_MIB`` over its start meanwhile, ordinary requests answered 200 meanwhile);
- ``undecodable_text``: lone surrogates as JSON escapes (``"\\ud800"``), invalid UTF-8 bytes, zero-width
  and empty text in every text field of every POST route (read off the served OpenAPI, ``/docs.json``);
  undecodable text gets a 4xx, the rest anything but a 5xx;
- ``no_key_methods``: every method on every protected path, spelled several ways, and wrong keys:
  never a 2xx, never a 5xx.

No 5xx, no request left unanswered (``timeout``) and no phase still running after ``PHASE_S``. Each phase runs once at a
fiftieth of its size first (the warm-up: every route and status seen once, so that bounded metric
series exist before the measured run; ``FULL_WARM_UP`` at its full size). After each measured phase, within ``SETTLE_S``: ``/metrics``'
size, the RSS and open files of the server's whole process tree and the requests in progress
(``textbento_inflight_requests``) are back to their level before it (``breaches``: the tolerances),
the same processes run; then the next 1,000 ordinary requests are all 200.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import secrets
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, NamedTuple
from urllib.parse import quote, urlparse

import aiohttp
import psutil
import requests

from harness.results import write_result
from harness.serving import ROOT, Server, role, serve
from harness.texts import WORDS, short_texts
from serving.settings import settings

HEADER_TIMEOUT_S = 5
BODY_TIMEOUT_S = 10
GRACE_S = 5  # a slow upload is closed at most this long after its deadline
WATCH_S = BODY_TIMEOUT_S + 15  # how long the slow uploads are watched for the server to close them
SETTLE_S = 15
WARM_UP_SCALE = 0.02
# Warmed up at full size: the C allocator keeps some of what the big bodies took (up to the workers' budgets) for
# the next ones, so the start's RSS includes that pool, and the measured run shows whether a second round adds to it.
FULL_WARM_UP = {"big_uploads"}
AFTER = 1000  # ordinary requests after each phase, all 200
QUICK_S = 10  # a body of a million texts is refused within this
PEAK_RSS_MIB = 1024  # most the process tree may grow while /tokenize is flooded
HOLD_S = 5  # how long the big uploads are held unfinished
PHASE_S = 240  # a phase still running then is stopped and fails
# Back to the start of a phase: what a phase may leave behind once settled.
METRICS_SLACK = (32 * 1024, 0.02)  # bytes, or a share of the start, whichever is larger (counts grow digits)
RSS_SLACK = (128, 0.10)  # MiB, or a share
FILES_SLACK = 8  # pooled connections between the processes come and go
OPEN_PATHS = ("/healthz", "/livez", "/readyz", "/metrics")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "TRACE", "PROPFIND", "BREW")
# Text that cannot be encoded as UTF-8 (a lone surrogate, as a JSON escape), bytes that are not UTF-8, and text that is empty to the eye.
UNDECODABLE = {"lone high surrogate": "\ud800", "lone low surrogate": "\udc00", "surrogate inside": "ab\udbffcd"}
INVALID_BYTES = {"invalid UTF-8 byte": b"\xff", "UTF-8 of a surrogate": b"\xed\xa0\x80"}
EMPTYISH = {"zero-width space": "\u200b", "empty": ""}
MARKER = "\u2603marker\u2603"  # stands for the invalid bytes until the body is encoded
ORDINARY = {
    "/v1/embeddings": lambda text: {"input": text},
    "/embed": lambda text: {"inputs": text},
    "/v2/embed": lambda text: {"texts": [text], "input_type": "search_document"},
    "/similarity": lambda text: {"inputs": {"source_sentence": text, "sentences": [text, "another text"]}},
    "/tokenize": lambda text: {"inputs": [text]},
}
INFLIGHT = re.compile(r"^textbento_inflight_requests (\S+)$", re.MULTILINE)


class Target(NamedTuple):
    """The server under attack and what the phases need to know of it."""

    server: Server
    key: str
    openapi: dict
    body_timeout_s: float | None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def address(self) -> tuple[str, int]:
        parsed = urlparse(self.server.url)
        return parsed.hostname, parsed.port

    @property
    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}


def deadlines() -> dict[str, str]:
    """The short deadlines, each where this tree has its setting."""
    from serving.settings import Settings

    env = {"TEXTBENTO_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S)}
    if "body_timeout_s" in Settings.model_fields:
        env["TEXTBENTO_BODY_TIMEOUT_S"] = str(BODY_TIMEOUT_S)
    return env


# Raw HTTP/1.1, for what a polite client library would not send.


def raw_request(method: str, path: str, headers: list[tuple[str, str]] = (), body: bytes | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *(f"{name}: {value}" for name, value in headers)]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + (body or b"")


def status_of(answer: bytes) -> str:
    """The status code of an answer's first line; ``closed`` when the server sent nothing."""
    parts = answer.split(b"\r\n", 1)[0].split()
    return parts[1].decode() if len(parts) > 1 and answer.startswith(b"HTTP/") else ("closed" if not answer else "garbled")


async def exchange(address: tuple[str, int], request: bytes, timeout_s: float = 30) -> str:
    """One request on a fresh connection; the answer's status, or what became of the connection."""
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(*address)
            try:
                with contextlib.suppress(ConnectionError):  # an answer may come before the whole request is taken
                    writer.write(request)
                    await writer.drain()
                answer = b""
                while b"\r\n\r\n" not in answer and len(answer) < 65536:
                    chunk = await reader.read(65536)
                    if not chunk:
                        break
                    answer += chunk
                return status_of(answer)
            finally:
                writer.transport.abort()
    except TimeoutError:
        return "timeout"
    except ConnectionError:
        return "reset"


async def exchanges(address: tuple[str, int], requests_: Iterator[tuple[str, bytes]], concurrency: int = 32) -> dict[str, Counter]:
    """Each (kind, request) on its own connection, ``concurrency`` at a time; statuses per kind."""
    statuses: dict[str, Counter] = {}

    async def client() -> None:
        for kind, request in requests_:
            statuses.setdefault(kind, Counter())[await exchange(address, request)] += 1

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return statuses


# Ordinary clients: one short text, on the routes of an embedder, with the key.


async def ordinary(target: Target, count: int, concurrency: int = 16, timeout_s: float = 30, seed: int = 1) -> tuple[Counter, list[float]]:
    """``count`` ordinary requests; their statuses and latencies (seconds)."""
    rng, texts, statuses, latencies = random.Random(seed), short_texts(256, seed), Counter(), []
    jobs = iter(range(count))
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(headers=target.auth, timeout=timeout) as session:

        async def client() -> None:
            for _ in jobs:
                path, make = rng.choice(sorted(ORDINARY.items()))
                started = time.monotonic()
                try:
                    async with session.post(target.url + path, json=make(rng.choice(texts))) as response:
                        await response.read()
                        statuses[str(response.status)] += 1
                except TimeoutError:
                    statuses["timeout"] += 1
                except aiohttp.ClientError as error:
                    statuses[type(error).__name__] += 1
                latencies.append(time.monotonic() - started)

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return statuses, latencies


@contextlib.asynccontextmanager
async def meanwhile(target: Target, figures: dict, concurrency: int = 2):
    """Ordinary requests sent for as long as the block runs; their statuses and latencies into ``figures``."""
    stop, statuses, latencies = asyncio.Event(), Counter(), []

    async def loop() -> None:
        seed = 100
        while not stop.is_set():
            seed += 1
            got, took = await ordinary(target, concurrency, concurrency=concurrency, timeout_s=QUICK_S, seed=seed)
            statuses.update(got)
            latencies.extend(took)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        stop.set()
        await task
        figures["meanwhile"] = {"statuses": dict(statuses), **latency_figures(latencies)}


def latency_figures(latencies: list[float]) -> dict:
    if not latencies:
        return {"p50_ms": None, "max_ms": None}
    return {"p50_ms": round(statistics.median(latencies) * 1000, 1), "max_ms": round(max(latencies) * 1000, 1)}


# The server's state.


def tree(server: Server) -> list[psutil.Process]:
    root = psutil.Process(server.process.pid)
    return [root, *root.children(recursive=True)]


def snapshot(target: Target) -> dict:
    """``/metrics``' size, the requests in progress, and the whole process tree's RSS and open files."""
    metrics = requests.get(f"{target.url}/metrics", headers=target.auth, timeout=30).content
    found = INFLIGHT.search(metrics.decode())
    processes = tree(target.server)
    each_rss, files = {}, 0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):  # gone: the process list says so
            each_rss[f"{role(' '.join(process.cmdline()))} {process.pid}"] = round(process.memory_info().rss / 2**20, 1)
            files += process.num_fds()
    return {
        "metrics_bytes": len(metrics),
        "metrics_series": sum(1 for line in metrics.splitlines() if line and not line.startswith(b"#")),
        "in_progress": float(found[1]) if found else None,
        "rss_mib": round(sum(each_rss.values()), 1),
        "rss_mib_by_process": each_rss,  # which one holds more, when the tree's total is over its bound
        "open_files": files,
        "processes": sorted(p.pid for p in processes),
    }


def breaches(start: dict, now: dict) -> list[str]:
    """What is not back to ``start`` in ``now``, within the tolerances."""
    found = []
    metrics_limit = start["metrics_bytes"] + max(METRICS_SLACK[0], METRICS_SLACK[1] * start["metrics_bytes"])
    if now["metrics_bytes"] > metrics_limit:
        found.append(f"/metrics {start['metrics_bytes']:,} → {now['metrics_bytes']:,} bytes")
    if (now["in_progress"] or 0) > (start["in_progress"] or 0):
        found.append(f"requests in progress {start['in_progress']} → {now['in_progress']}")
    if now["rss_mib"] > start["rss_mib"] + max(RSS_SLACK[0], RSS_SLACK[1] * start["rss_mib"]):
        grown = {name: round(mib - start["rss_mib_by_process"].get(name, 0.0), 1) for name, mib in now["rss_mib_by_process"].items()}
        found.append(f"RSS {start['rss_mib']:,} → {now['rss_mib']:,} MiB (MiB more by process: {grown})")
    if now["open_files"] > start["open_files"] + FILES_SLACK:
        found.append(f"open files {start['open_files']} → {now['open_files']}")
    if now["processes"] != start["processes"]:
        found.append(f"processes {start['processes']} → {now['processes']}")
    return found


def settle(target: Target, start: dict, within_s: float = SETTLE_S) -> tuple[float | None, dict, list[str]]:
    """Seconds until the server is back to ``start`` (None: not within ``within_s``), the last snapshot, what is not back."""
    started = time.monotonic()
    while True:
        now = snapshot(target)
        if not (over := breaches(start, now)):
            return round(time.monotonic() - started, 1), now, []
        if time.monotonic() - started > within_s:
            return None, now, over
        time.sleep(0.5)


class PeakRSS:
    """The process tree's highest RSS (MiB) while the block runs: sampled as it starts, every 0.1 s, and as it ends
    (a block shorter than a sampling interval still has a peak)."""

    def __init__(self, server: Server) -> None:
        self.server, self.peak, self.stop = server, 0.0, threading.Event()

    def sample(self) -> None:
        while True:
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, self.server.rss_mib())
            if self.stop.wait(0.1):
                break
        with contextlib.suppress(psutil.Error):
            self.peak = max(self.peak, self.server.rss_mib())

    def __enter__(self) -> PeakRSS:
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


# The served OpenAPI: the POST routes and their text fields.


def resolve(schema: dict, openapi: dict) -> dict:
    while "$ref" in schema:
        schema = openapi["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def example(schema: dict, openapi: dict) -> Any:
    """The least valid value of ``schema``: one short text wherever text goes."""
    schema = resolve(schema, openapi)
    if "anyOf" in schema:
        return example(next(option for option in schema["anyOf"] if option.get("type") != "null"), openapi)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: example(properties[name], openapi) for name in schema.get("required", [])}
    if kind == "array":
        if "prefixItems" in schema:
            return [example(item, openapi) for item in schema["prefixItems"]]
        return [example(schema.get("items", {}), openapi)]
    return {"string": "x", "integer": max(1, int(schema.get("minimum", 1))), "number": 1.0, "boolean": False}.get(kind, "x")


def variants(schema: dict, openapi: dict, text: Any, count: int = 1, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Every way a value of ``schema`` can carry ``text`` in one place (in an array: ``count`` times),
    the rest least valid: (where the text is, e.g. ``inputs.sentences[]``, the value)."""
    schema = resolve(schema, openapi)
    kind = schema.get("type")
    if depth > 5:
        return
    if "anyOf" in schema:
        seen = set()
        for option in schema["anyOf"]:
            for label, value in variants(option, openapi, text, count, depth + 1):
                if label not in seen:
                    seen.add(label)
                    yield label, value
    elif kind == "string" or "enum" in schema:
        yield "", text
    elif kind == "array" and "prefixItems" in schema:  # a pair: the text in one place, the other least valid
        items = schema["prefixItems"]
        for index, item in enumerate(items):
            for label, value in variants(item, openapi, text, 1, depth + 1):
                yield f"[{index}]{label}", [value if i == index else example(other, openapi) for i, other in enumerate(items)]
    elif kind == "array":
        for label, value in variants(schema.get("items", {}), openapi, text, 1, depth + 1):
            yield f"[]{label}", [value] * count
    elif kind == "object":
        base = example(schema, openapi)
        for name, field in schema.get("properties", {}).items():
            for label, value in variants(field, openapi, text, count, depth + 1):
                yield f"{name}{'.' if label and not label.startswith('[') else ''}{label}", {**base, name: value}


def post_routes(openapi: dict) -> dict[str, dict]:
    """Every POST route and its body's schema; a route whose body is any object (TEI's ``/``) takes each TEI route's."""
    routes = {}
    for path, operations in openapi["paths"].items():
        if "post" in operations and path not in OPEN_PATHS:
            routes[path] = operations["post"].get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    return routes


def route_variants(openapi: dict, text: Any, count: int = 1) -> Iterator[tuple[str, str, Any]]:
    """(route, field, body) for every text field of every POST route, one at a time."""
    routes, seen = post_routes(openapi), set()
    for path, schema in routes.items():
        schemas = [schema]
        if not resolve(schema, openapi).get("properties"):
            schemas = [routes[tei] for tei in ("/embed", "/similarity", "/rerank", "/predict") if tei in routes]
        for each in schemas:
            for field, body in variants(each, openapi, text, count):
                if (path, field) not in seen:
                    seen.add((path, field))
                    yield path, field, body


def query_texts(openapi: dict) -> Iterator[tuple[str, str, bytes]]:
    """(route, query parameter, a least valid body) for every text query parameter of a POST route."""
    routes = post_routes(openapi)
    for path, schema in routes.items():
        body = example(schema if resolve(schema, openapi).get("properties") else routes.get("/embed", schema), openapi)
        for parameter in openapi["paths"][path]["post"].get("parameters", []):
            if parameter.get("in") == "query" and any(v[0] == "" for v in variants(parameter.get("schema", {}), openapi, "")):
                yield path, parameter["name"], json.dumps(body).encode()


def protected_paths(openapi: dict) -> list[str]:
    return [path for path in openapi["paths"] if path not in OPEN_PATHS]


# The phases: each sends its traffic and returns its figures, with ``statuses`` and ``failures``.


def no_5xx(statuses: Counter | dict, what: str) -> list[str]:
    """A failure for every 5xx and every request left unanswered."""
    bad = {status: count for status, count in statuses.items() if status.startswith("5") or status == "timeout"}
    return [f"{what}: {bad}"] if bad else []


def no_2xx(statuses: Counter | dict, what: str) -> list[str]:
    good = {status: count for status, count in statuses.items() if status.startswith("2")}
    return [f"{what} answered {good}"] if good else []


def scaled(count: int, scale: float) -> int:
    return max(1, round(count * scale))


async def unknown_paths(target: Target, scale: float) -> dict:
    """Unknown paths without a key, every method: never a 2xx or a 5xx, and no metric series per path."""
    rng, count = random.Random(2), scaled(3000, scale)
    prefixes = ("/zz-", "/zz-", "/v1/zz-", "/v2/zz-", "/api/zz-", "/zz/")

    def sent() -> Iterator[tuple[str, bytes]]:
        for _ in range(count):
            method = rng.choice(METHODS)
            body = b'{"input": "x"}' if method in ("POST", "PUT", "PATCH") else None
            yield method, raw_request(method, rng.choice(prefixes) + uuid.UUID(int=rng.getrandbits(128)).hex, body=body)

    statuses = await exchanges(target.address, sent())
    total = sum(statuses.values(), Counter())
    return {"requests": count, "statuses": dict(total), "by_method": {k: dict(v) for k, v in statuses.items()}} | {
        "failures": no_5xx(total, "unknown paths") + no_2xx(total, "unknown paths")
    }


async def slow_upload(target: Target, started: asyncio.Semaphore, opened: list, trickle: bool) -> tuple[str, float | None]:
    """Headers of an 8,000,000-byte body and its first byte, then nothing (or a byte a second): what the
    server did (its status, ``closed``, or ``still open`` at ``WATCH_S``) and when, from the connection's opening."""
    head = raw_request("POST", "/v1/embeddings", [("Authorization", f"Bearer {target.key}")], body=b"").replace(
        b"Content-Length: 0", b"Content-Length: 8000000"
    )
    async with started:
        reader, writer = await asyncio.open_connection(*target.address)
        began = time.monotonic()
        writer.write(head + b"{")
        await writer.drain()
    opened.append(began)

    async def trickling() -> None:
        with contextlib.suppress(ConnectionError):
            while True:
                await asyncio.sleep(1)
                writer.write(b" ")
                await writer.drain()

    dripping = asyncio.create_task(trickling()) if trickle else None
    try:
        async with asyncio.timeout(WATCH_S):
            answer = await reader.read(4096)
        return status_of(answer), round(time.monotonic() - began, 2)
    except TimeoutError:
        return "still open", None
    except ConnectionError:
        return "reset", round(time.monotonic() - began, 2)
    finally:
        if dripping:
            dripping.cancel()
        writer.transport.abort()


async def probe_within(target: Target, count: int = 20, within_s: float = 5) -> Counter:
    """``count`` ordinary requests at once, each given ``within_s``: their statuses."""
    statuses, _ = await ordinary(target, count, concurrency=count, timeout_s=within_s, seed=7)
    return statuses


async def slow_bodies(target: Target, scale: float) -> dict:
    """Stalled and trickling uploads by the thousand; ordinary requests answered meanwhile; each upload closed at its deadline."""
    stalled, trickling = scaled(1200, scale), scaled(300, scale)
    started, opened = asyncio.Semaphore(64), []
    uploads = [asyncio.create_task(slow_upload(target, started, opened, trickle)) for trickle in [False] * stalled + [True] * trickling]
    while len(opened) < len(uploads) and not any(upload.done() for upload in uploads):
        await asyncio.sleep(0.05)
    opening_s = round(max(opened) - min(opened), 2) if opened else None
    probes = await probe_within(target)
    outcomes = await asyncio.gather(*uploads, return_exceptions=True)
    kinds = {"stalled": outcomes[:stalled], "trickling": outcomes[stalled:]}
    figures = {
        "stalled": stalled,
        "trickling": trickling,
        "opening_s": opening_s,
        "body_timeout_s": target.body_timeout_s,
        "probes_within_5_s": dict(probes),
    }
    failures = [] if probes == Counter({"200": sum(probes.values())}) else [f"ordinary requests among the slow uploads: {dict(probes)}"]
    limit = (target.body_timeout_s or 0) + GRACE_S
    for kind, results in kinds.items():
        statuses = Counter(result[0] if isinstance(result, tuple) else type(result).__name__ for result in results)
        closed_after = [result[1] for result in results if isinstance(result, tuple) and result[1] is not None]
        figures[kind + "_outcomes"] = dict(statuses)
        figures[kind + "_closed_after_s"] = {"min": min(closed_after, default=None), "max": max(closed_after, default=None)}
        failures += no_5xx(statuses, f"{kind} uploads")
        if statuses["still open"]:
            failures.append(f"{kind} uploads: {statuses['still open']} still open {WATCH_S} s after they opened")
        if target.body_timeout_s is None:
            failures.append(f"{kind} uploads: no body deadline setting (TEXTBENTO_BODY_TIMEOUT_S)")
        elif late := [after for after in closed_after if after > limit]:
            failures.append(f"{kind} uploads: {len(late)} closed later than {limit} s (latest {max(late)} s)")
    statuses = sum((Counter(figures[kind + "_outcomes"]) for kind in kinds), Counter())
    return figures | {"statuses": dict(statuses), "failures": failures}


async def big_upload(target: Target) -> str:
    """7.9 MB of an 8,000,000-byte body, then nothing for ``HOLD_S``: ``body_budget`` if refused as its
    bytes arrive, ``held`` if the server kept reading it, else the status it answered."""
    # With ``Connection: close``: refused, the server lingers (serving/compat/uvicorn_connections.py),
    # or the bytes still arriving would make the client's kernel see a reset before it reads the answer.
    head = raw_request("POST", "/v1/embeddings", [("Authorization", f"Bearer {target.key}")], body=b"")
    head = head.replace(b"Content-Length: 0", b"Content-Length: 8000000")
    reader, writer = await asyncio.open_connection(*target.address)
    try:
        writer.write(head + b'{"input": "' + b"a" * 7_900_000)
        await writer.drain()
        async with asyncio.timeout(HOLD_S):
            answer = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length: (\d+)", answer)
            answer += await reader.readexactly(int(length[1])) if length else b""
        return "body_budget" if b'"body_budget"' in answer else status_of(answer)
    except TimeoutError:
        return "held"
    except (ConnectionError, asyncio.IncompleteReadError):
        return "reset"
    finally:
        writer.transport.abort()


async def big_uploads(target: Target, scale: float) -> dict:
    """Uploads of 7.9 MB at once, held unfinished: past the workers' body budget refused, memory bounded by it."""
    uploads, workers, budget_mib = scaled(64, scale), settings.api_workers, settings.body_budget_bytes / 2**20
    start_rss = target.server.rss_mib()
    with PeakRSS(target.server) as peak:
        statuses = Counter(await asyncio.gather(*(big_upload(target) for _ in range(uploads))))
    most_mib = workers * budget_mib + RSS_SLACK[0]
    figures = {
        "uploads": uploads,
        "bytes_each": 7_900_000,
        "api_workers": workers,
        "body_budget_mib": budget_mib,
        "rss_mib_start": round(start_rss, 1),
        "rss_mib_peak": round(peak.peak, 1),
    }
    failures = [f"{count} uploads answered {status}" for status, count in statuses.items() if status not in {"body_budget", "held"}]
    if peak.peak - start_rss > most_mib:
        failures.append(f"RSS {start_rss:,.0f} → {peak.peak:,.0f} MiB under the uploads (at most +{most_mib:,.0f} MiB)")
    return figures | {"statuses": dict(statuses), "failures": failures}


async def oversized_headers(target: Target, scale: float) -> dict:
    """Headers too big to be honest, on a protected route, without a valid key: never a 2xx or a 5xx, never a hang."""
    count, body = scaled(100, scale), b'{"input": "x"}'
    kinds = {
        "60 KB Authorization": raw_request("POST", "/v1/embeddings", [("Authorization", "Bearer " + "k" * 60_000)], body),
        "2,000 headers": raw_request("POST", "/v1/embeddings", [(f"X-Hostile-{i}", "v" * 20) for i in range(2000)], body),
        "60 KB path": raw_request("GET", "/v1/models/" + "p" * 60_000),
        "1 MiB cookie": raw_request("POST", "/v1/embeddings", [("Cookie", "c=" + "x" * 2**20)], body),
    }
    statuses = await exchanges(target.address, ((kind, request) for _ in range(count) for kind, request in kinds.items()), concurrency=16)
    total = sum(statuses.values(), Counter())
    failures = no_5xx(total, "oversized headers") + [failure for kind, got in statuses.items() for failure in no_2xx(got, kind)]
    return {"requests_per_kind": count, "statuses": dict(total), "by_kind": {kind: dict(got) for kind, got in statuses.items()}} | {
        "failures": failures
    }


async def post_timed(session: aiohttp.ClientSession, url: str, body: bytes, timeout_s: float) -> tuple[str, float, int]:
    """A JSON body; the status, the seconds to the whole answer, the answer's size."""
    started = time.monotonic()
    try:
        async with session.post(
            url, data=body, headers={"content-type": "application/json"}, timeout=aiohttp.ClientTimeout(timeout_s)
        ) as r:
            answer = await r.read()
            return str(r.status), round(time.monotonic() - started, 2), len(answer)
    except TimeoutError:
        return "timeout", round(time.monotonic() - started, 2), 0
    except aiohttp.ClientError as error:
        return type(error).__name__, round(time.monotonic() - started, 2), 0


async def tiny_texts(target: Target, scale: float) -> dict:
    """1.5 million one-character texts in one body, on every route that takes a list: refused quickly, others unaffected."""
    count = scaled(1_500_000, scale)
    per_route = {}
    for path, field, body in route_variants(target.openapi, "a", count):
        if "[]" in field and path not in per_route:
            per_route[path] = (field, json.dumps(body, separators=(",", ":")).encode())
    figures, statuses, failures = {"texts_per_body": count, "routes": {}}, Counter(), []
    async with (
        aiohttp.ClientSession(headers=target.auth, connector=aiohttp.TCPConnector(force_close=True)) as session,
        meanwhile(target, figures),
    ):
        for path, (field, body) in sorted(per_route.items()):
            status, seconds, _ = await post_timed(session, target.url + path, body, QUICK_S + 5)
            figures["routes"][path] = {"field": field, "body_bytes": len(body), "status": status, "seconds": seconds}
            statuses[status] += 1
            if not status.startswith("4") or seconds > QUICK_S:
                failures.append(f"{path} {field} × {count:,}: {status} after {seconds} s (a 4xx within {QUICK_S} s)")
    return figures | {"statuses": dict(statuses), "failures": failures + meanwhile_failures(figures)}


def meanwhile_failures(figures: dict) -> list[str]:
    got = figures["meanwhile"]["statuses"]
    return [] if set(got) <= {"200"} else [f"ordinary requests meanwhile: {got}"]


def long_text(rng: random.Random, chars: int) -> str:
    words, length = [], 0
    while length < chars:
        words.append(rng.choice(WORDS) + rng.choice(("", "s", "ing", "ed", "ly", "ness")))
        length += len(words[-1]) + 1
    return " ".join(words)[:chars]


async def tokenize_flood(target: Target, scale: float) -> dict:
    """Concurrent /tokenize bodies of 256 texts of 19,000 characters: no 5xx, memory bounded, others unaffected."""
    rng = random.Random(3)
    concurrent, texts = scaled(4, scale), 256
    bodies = [json.dumps({"inputs": [long_text(rng, 19_000) for _ in range(texts)]}).encode() for _ in range(concurrent)]
    figures = {"concurrent": concurrent, "texts": texts, "chars_per_text": 19_000, "body_bytes": len(bodies[0])}
    start_rss = target.server.rss_mib()
    with PeakRSS(target.server) as peak:
        async with (
            aiohttp.ClientSession(headers=target.auth, connector=aiohttp.TCPConnector(force_close=True)) as session,
            meanwhile(target, figures),
        ):
            answers = await asyncio.gather(*(post_timed(session, f"{target.url}/tokenize", body, 150) for body in bodies))
    statuses = Counter(status for status, _, _ in answers)
    figures |= {
        "answers": [{"status": status, "seconds": seconds, "answer_bytes": size} for status, seconds, size in answers],
        "rss_mib_start": round(start_rss, 1),
        "rss_mib_peak": round(peak.peak, 1),
    }
    failures = no_5xx(statuses, "/tokenize floods") + meanwhile_failures(figures)
    if peak.peak - start_rss > PEAK_RSS_MIB:
        failures.append(f"RSS {start_rss:,.0f} → {peak.peak:,.0f} MiB while /tokenize was flooded (at most +{PEAK_RSS_MIB} MiB)")
    return figures | {"statuses": dict(statuses), "failures": failures}


def with_invalid_bytes(body: Any, raw: bytes) -> bytes:
    return json.dumps(body).encode().replace(json.dumps(MARKER)[1:-1].encode(), raw)


def names(answer: bytes, field: str) -> bool:
    """Whether an error answer names the field (its first part: ``input`` of ``input[]``)."""
    return re.split(r"[.\[]", field, maxsplit=1)[0].encode() in answer


async def undecodable_text(target: Target, scale: float) -> dict:
    """Every text field of every POST route given undecodable text (a 4xx), and zero-width or empty text (no 5xx)."""
    sent: list[tuple[str, str, str, bytes]] = []  # (kind, route, field, body)
    for kind, text in {**UNDECODABLE, **EMPTYISH}.items():
        sent += [(kind, path, field, json.dumps(body).encode()) for path, field, body in route_variants(target.openapi, text)]
    for kind, raw in INVALID_BYTES.items():
        sent += [(kind, path, field, with_invalid_bytes(body, raw)) for path, field, body in route_variants(target.openapi, MARKER)]
    for path, name, body in query_texts(target.openapi):
        sent += [(kind, f"{path}?{name}={quote(raw)}", name, body) for kind, raw in INVALID_BYTES.items()]
    jobs, results = iter(sent), []
    async with aiohttp.ClientSession(headers=target.auth, connector=aiohttp.TCPConnector(force_close=True)) as session:

        async def client() -> None:
            for kind, path, field, body in jobs:
                try:
                    async with session.post(
                        target.url + path, data=body, headers={"content-type": "application/json"}, timeout=aiohttp.ClientTimeout(15)
                    ) as r:
                        answer = await r.read()
                        results.append((kind, path, field, str(r.status), names(answer, field)))
                except TimeoutError:
                    results.append((kind, path, field, "timeout", False))
                except aiohttp.ClientError as error:
                    results.append((kind, path, field, type(error).__name__, False))

        await asyncio.gather(*(client() for _ in range(8)))
    by_kind: dict[str, Counter] = {}
    for kind, _, _, status, _ in results:
        by_kind.setdefault(kind, Counter())[status] += 1
    refused = {*UNDECODABLE, *INVALID_BYTES}
    wrong = sorted(
        {f"{path} {field} ({kind}): {status}" for kind, path, field, status, _ in results if bad_text_answer(kind in refused, status)}
    )
    failures = [f"{len(wrong)} answers: {'; '.join(wrong[:12])}{' …' if len(wrong) > 12 else ''}"] if wrong else []
    undecodable = [result for result in results if result[0] in refused]
    return {
        "routes": sorted({path for _, path, _, _ in sent}),
        "fields": len({(path, field) for _, path, field, _ in sent}),
        "requests": len(results),
        "by_kind": {kind: dict(got) for kind, got in by_kind.items()},
        "undecodable_422_naming_the_field": sum(status == "422" and named for _, _, _, status, named in undecodable),
        "undecodable_answers": len(undecodable),
        "undecodable_not_422": sorted({f"{path} {field}: {status}" for _, path, field, status, _ in undecodable if status != "422"})[:40],
        "statuses": dict(sum(by_kind.values(), Counter())),
        "failures": failures,
    }


def bad_text_answer(undecodable: bool, status: str) -> bool:
    """A 5xx or no answer; for undecodable text, anything but a 4xx."""
    return status.startswith("5") or status == "timeout" or (undecodable and not status.startswith("4"))


def spellings(path: str) -> list[str]:
    """A protected path as a client may spell it to slip past a check on the exact path."""
    head, _, tail = path.rpartition("/")
    return [
        path,
        path + "/",
        "/" + path,
        path + "?x=1",
        path.upper(),
        f"{head}/%{ord(tail[0]):02X}{tail[1:]}" if tail else path + "%2F",
        "/." + path,
        path + "/.",
    ]


WRONG_KEYS = {
    "empty Bearer": lambda key: "Bearer ",
    "Bearer alone": lambda key: "Bearer",
    "Basic": lambda key: "Basic " + key,
    "Token scheme": lambda key: "Token " + key,
    "key with one more character": lambda key: f"Bearer {key}x",
    "key less its last character": lambda key: f"Bearer {key[:-1]}",
    "two keys": lambda key: f"Bearer {key},{key}",
}


async def no_key_methods(target: Target, scale: float) -> dict:
    """Every method on every protected path, spelled several ways, without a key; wrong keys: never a 2xx or a 5xx."""
    body = b'{"input": "x", "inputs": "x"}'

    def sent() -> Iterator[tuple[str, bytes]]:
        for path in protected_paths(target.openapi):
            for spelled in spellings(path):
                for method in METHODS:
                    yield f"{method} no key", raw_request(method, spelled, body=body if method in ("POST", "PUT", "PATCH") else None)
            for kind, header in WRONG_KEYS.items():
                yield kind, raw_request("POST", path, [("Authorization", header(target.key))], body=body)

    statuses = await exchanges(target.address, sent())
    total = sum(statuses.values(), Counter())
    docs = await exchange(target.address, raw_request("GET", "/docs.json"))
    return {
        "paths": len(protected_paths(target.openapi)),
        "requests": sum(total.values()),
        "statuses": dict(total),
        "by_kind": {kind: dict(got) for kind, got in statuses.items()},
        "docs_json_without_key": docs,
        "failures": no_5xx(total, "without a key") + [failure for kind, got in statuses.items() for failure in no_2xx(got, kind)],
    }


Phase = Callable[[Target, float], Awaitable[dict]]
PHASES: dict[str, Phase] = {
    "unknown_paths": unknown_paths,
    "slow_bodies": slow_bodies,
    "big_uploads": big_uploads,
    "oversized_headers": oversized_headers,
    "tiny_texts": tiny_texts,
    "tokenize_flood": tokenize_flood,
    "undecodable_text": undecodable_text,
    "no_key_methods": no_key_methods,
}


def bounded(target: Target, phase: Phase, scale: float) -> dict:
    """A phase's figures; a phase still running after ``PHASE_S`` is stopped, and fails."""

    async def run() -> dict:
        try:
            return await asyncio.wait_for(phase(target, scale), PHASE_S)
        except TimeoutError:
            return {"statuses": {}, "failures": [f"still running after {PHASE_S} s"]}

    return asyncio.run(run())


def measured(target: Target, phase: Phase, scale: float) -> dict:
    """A phase, then the server back to its state before it within ``SETTLE_S``, then ``AFTER`` ordinary requests."""
    before = snapshot(target)
    started = time.monotonic()
    figures = bounded(target, phase, scale)
    seconds = round(time.monotonic() - started, 1)
    settled_s, after, over = settle(target, before)
    statuses, latencies = asyncio.run(ordinary(target, AFTER))
    failures = list(figures.pop("failures"))
    if settled_s is None:
        failures.append(f"not back {SETTLE_S} s after: {'; '.join(over)}")
    if set(statuses) != {"200"}:
        failures.append(f"the {AFTER} requests after it: {dict(statuses)}")
    return {
        "seconds": seconds,
        **figures,
        "before": before,
        "after": after,
        "settled_s": settled_s,
        "next": {"requests": AFTER, "statuses": dict(statuses), **latency_figures(latencies)},
        "failures": failures,
        "passed": not failures,
    }


def battery(target: Target, scale: float = 1.0, only: list[str] | None = None) -> dict:
    """The warm-up, then every phase measured; the report."""
    phases = {name: phase for name, phase in PHASES.items() if not only or name in only}
    warm_up, report = {}, {"scale": scale, "phases": {}}
    started = time.monotonic()
    statuses, _ = asyncio.run(ordinary(target, 300))
    warm_up["ordinary"] = {"statuses": dict(statuses)}
    for name, phase in phases.items():
        figures = bounded(target, phase, scale * (1.0 if name in FULL_WARM_UP else WARM_UP_SCALE))
        warm_up[name] = {"statuses": figures["statuses"], "failures": figures["failures"]}
        print(f"warm-up {name}: {figures['statuses']}", flush=True)
    start = snapshot(target)
    for name, phase in phases.items():
        report["phases"][name] = result = measured(target, phase, scale)
        print(f"{name}: {result['seconds']} s, {result['statuses']}, {'passed' if result['passed'] else result['failures']}", flush=True)
    end = snapshot(target)
    failures = [f"warm-up {name}: {failure}" for name, got in warm_up.items() for failure in got.get("failures", [])]
    failures += [f"{name}: {failure}" for name, result in report["phases"].items() for failure in result["failures"]]
    failures += [f"the whole battery: {breach}" for breach in breaches(start, end)]
    return report | {
        "seconds": round(time.monotonic() - started, 1),
        "warm_up": warm_up,
        "start": start,
        "end": end,
        "failures": failures,
        "passed": not failures,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0, help="every phase's count times this")
    parser.add_argument("--phases", default="", help="comma-separated phases to run (default: all): " + ", ".join(PHASES))
    parser.add_argument("--model", default="text-model:latest")
    parser.add_argument("--out", default="hostile.json")
    args = parser.parse_args()
    key, env = secrets.token_urlsafe(24), deadlines()
    log = ROOT / "build" / "hostile-server.log"
    log.parent.mkdir(exist_ok=True)
    with serve(env={"TEXTBENTO_MODEL": args.model, "TEXTBENTO_API_KEYS": key, **env}, log_path=log) as server:
        openapi = requests.get(f"{server.url}/docs.json", headers={"authorization": f"Bearer {key}"}, timeout=30).json()
        target = Target(server, key, openapi, float(env["TEXTBENTO_BODY_TIMEOUT_S"]) if "TEXTBENTO_BODY_TIMEOUT_S" in env else None)
        report = battery(target, args.scale, [name for name in args.phases.split(",") if name])
    report = {"model": args.model, "settings": env, **report, "server_log": str(log.relative_to(ROOT))}
    path = write_result(args.out, report)
    for failure in report["failures"]:
        print("FAILED", failure)
    print(f"{'passed' if report['passed'] else 'FAILED'} in {report['seconds']} s: {path}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
