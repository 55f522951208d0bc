"""Connection timeouts (serving/connections.py, serving/compat/uvicorn_connections.py, api/middleware.ReadBodyFirst):
slow clients are cut off, slow uploads answered 408 without holding an admission slot, idle connections closed,
the bytes of bodies a worker holds at once bounded (api.middleware.BodySizeLimit).
That the Encoder never closes an idle connection its client may still reuse is pinned in tests/test_compat.py."""

from __future__ import annotations

import asyncio
import json
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import requests
from pydantic import ValidationError

from api.middleware import BodySizeLimit, ReadBodyFirst, read_body
from serving.settings import Settings, settings
from tests.conftest import lone_latencies, running

ROOT = Path(__file__).resolve().parent.parent
SLOW_CLIENTS = 2000
HEADER_TIMEOUT_S = 3
BODY_TIMEOUT_S = 3
MAX_CONCURRENCY = 4  # per API worker: a few stalled uploads would fill it, were they admitted before their body
BODY_BUDGET_BYTES = 8 * 2**20  # per API worker: one 5 MB upload in progress, not two


def test_the_open_files_limit_is_raised_to_the_hard_limit():
    script = (
        "import resource; from serving.connections import raise_open_files_limit; "
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)); "
        "print(raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)"
    )
    raised, soft, hard = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert raised == soft and int(soft) > 256 and (soft == hard or hard == str(resource.RLIM_INFINITY))


async def slow_header_connection(host: str, port: int, closed_after: list[float]) -> None:
    """Opens a connection and sends one header line a second, never finishing; records when the server closes it."""
    opened = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"POST /v1/embeddings HTTP/1.1\r\nHost: textbento\r\n")
        for line in range(60):
            try:
                if await asyncio.wait_for(reader.read(1), timeout=1.0) == b"":
                    break  # closed by the server
            except TimeoutError:
                writer.write(b"X-Slow-%d: 1\r\n" % line)
                await writer.drain()
    except (ConnectionError, OSError):
        pass
    closed_after.append(time.monotonic() - opened)
    writer.close()


@pytest.fixture(scope="module")
def guarded_server(embed_tag, logs):
    env = {
        "TEXTBENTO_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "TEXTBENTO_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "TEXTBENTO_KEEP_ALIVE_S": "2",
        "TEXTBENTO_MAX_CONCURRENCY": str(MAX_CONCURRENCY),
        "TEXTBENTO_BODY_BUDGET_BYTES": str(BODY_BUDGET_BYTES),
    }
    with running(embed_tag, logs, "connections", **env) as server:
        yield server


def test_slow_header_clients_are_cut_off_while_requests_keep_their_latency(guarded_server):
    url = guarded_server.url
    host, port = url.removeprefix("http://").split(":")

    async def scenario():
        quiet = await lone_latencies(url, 20, pause_s=0.05)
        closed_after: list[float] = []
        slow = [asyncio.create_task(slow_header_connection(host, int(port), closed_after)) for _ in range(SLOW_CLIENTS)]
        await asyncio.sleep(0.5)
        loaded = await lone_latencies(url, 20, pause_s=0.05)
        await asyncio.gather(*slow)
        return quiet, loaded, closed_after

    quiet, loaded, closed_after = asyncio.run(scenario())
    print(
        f"\n{SLOW_CLIENTS} slow-header connections closed after {min(closed_after):.1f}-{max(closed_after):.1f} s; "
        f"probe p50 {statistics.median(quiet) * 1000:.1f} ms quiet, {statistics.median(loaded) * 1000:.1f} ms among them"
    )
    assert len(closed_after) == SLOW_CLIENTS
    # Cut at the deadline (not before), within a few seconds of it on a loaded 2-core machine.
    assert min(closed_after) > HEADER_TIMEOUT_S - 0.5 and max(closed_after) < HEADER_TIMEOUT_S + 10
    # The slow clients share this event loop with the probes: 150 ms of slack for its bursts of their writes.
    assert statistics.median(loaded) < max(3 * statistics.median(quiet), statistics.median(quiet) + 0.15)


def test_a_silent_connection_is_closed_at_the_header_deadline(guarded_server):
    host, port = guarded_server.url.removeprefix("http://").split(":")

    async def silent() -> float:
        opened = time.monotonic()
        reader, writer = await asyncio.open_connection(host, int(port))
        assert await asyncio.wait_for(reader.read(1), timeout=HEADER_TIMEOUT_S + 10) == b""
        writer.close()
        return time.monotonic() - opened

    assert HEADER_TIMEOUT_S - 0.5 < asyncio.run(silent()) < HEADER_TIMEOUT_S + 5


UPLOAD_HEAD = b"POST /v1/embeddings HTTP/1.1\r\nHost: textbento\r\nContent-Type: application/json\r\nContent-Length: 8000000\r\n\r\n{"


async def slow_upload(host: str, port: int, byte_every_s: float | None) -> tuple[bytes, float]:
    """Sends an upload's headers and its first byte, then nothing (``byte_every_s`` None) or a byte every
    ``byte_every_s``; returns what the server answered, and when it closed the connection."""
    opened = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(UPLOAD_HEAD)
    answer = b""
    try:
        while time.monotonic() - opened < BODY_TIMEOUT_S + 15:
            try:
                if not (chunk := await asyncio.wait_for(reader.read(65536), timeout=byte_every_s or 1.0)):
                    break  # closed by the server
                answer += chunk
            except TimeoutError:
                if byte_every_s is not None:
                    writer.write(b" ")
                    await writer.drain()
    except (ConnectionError, OSError):
        pass
    writer.close()
    return answer, time.monotonic() - opened


def test_slow_uploads_get_408_and_hold_no_admission_slot(guarded_server):
    """Uploads that stall or trickle after their first byte are answered 408 at the body deadline and closed;
    meanwhile ordinary requests are answered 200, though there are more slow uploads than admission slots."""
    url = guarded_server.url
    host, port = url.removeprefix("http://").split(":")
    stalled, trickling = 30, 10

    async def scenario():
        uploads = [asyncio.create_task(slow_upload(host, int(port), None)) for _ in range(stalled)]
        uploads += [asyncio.create_task(slow_upload(host, int(port), 0.5)) for _ in range(trickling)]
        await asyncio.sleep(0.5)
        probes = await lone_latencies(url, 10, pause_s=0.05)  # each asserts its 200
        return probes, await asyncio.gather(*uploads)

    probes, uploads = asyncio.run(scenario())
    closed_after = [seconds for _, seconds in uploads]
    print(f"\n{stalled} stalled and {trickling} trickling uploads closed after {min(closed_after):.1f}-{max(closed_after):.1f} s")
    assert len(probes) == 10
    for answer, seconds in uploads:
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head.lower(), answer
        assert json.loads(body)["error"]["type"] == "body_timeout"
        assert BODY_TIMEOUT_S - 0.5 < seconds < BODY_TIMEOUT_S + 10
    metrics = requests.get(f"{url}/metrics", timeout=10).text
    assert float(re.search(r'textbento_rejected_total\{reason="slow_body"\} (\S+)', metrics)[1]) == stalled + trickling


async def asgi_request(app, path: str, chunks: list[bytes]) -> tuple[int, dict, bytes]:
    """One request through ``app``, its body in ``chunks``: the status, headers and body it answered."""
    messages = [{"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1} for i, chunk in enumerate(chunks)]
    sent = []

    async def receive():
        return messages.pop(0) if messages else await asyncio.Event().wait()

    async def send(message):
        sent.append(message)

    await app({"type": "http", "method": "POST", "path": path, "headers": []}, receive, send)
    return sent[0]["status"], {k.decode(): v.decode() for k, v in sent[0]["headers"]}, b"".join(m.get("body", b"") for m in sent[1:])


def test_bodies_past_the_workers_budget_get_503_and_every_byte_is_given_back():
    async def scenario():
        release = asyncio.Event()

        async def route(scope, receive, send):  # /hold keeps its body (and its request) until released
            await read_body(receive)
            if scope["path"] == "/hold":
                await release.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        guarded = BodySizeLimit(ReadBodyFirst(route, timeout_s=5), max_bytes=800, budget_bytes=1000)
        held = asyncio.create_task(asgi_request(guarded, "/hold", [b"a" * 300, b"a" * 300]))
        while guarded.held < 600:
            await asyncio.sleep(0.01)
        over = await asgi_request(guarded, "/v1/embeddings", [b"b" * 300, b"b" * 300])  # 1,200 bytes held at its second chunk
        after_over = guarded.held
        fits = await asgi_request(guarded, "/v1/embeddings", [b"c" * 400])  # exactly the budget
        release.set()
        held = await held
        too_large = await asgi_request(guarded, "/v1/embeddings", [b"d" * 500, b"d" * 400])
        return held, over, after_over, fits, too_large, guarded.held

    held, over, after_over, fits, too_large, left = asyncio.run(scenario())
    status, headers, body = over
    assert status == 503 and headers["retry-after"] == "1" and json.loads(body)["error"]["type"] == "body_budget", over
    assert after_over == 600  # the refused body's 300 bytes given back at once
    assert fits[0] == held[0] == 200 and too_large[0] == 413
    assert left == 0


def test_the_heap_is_handed_back_after_a_large_body_only(monkeypatch):
    """A large body's chunks and what was parsed from them are freed amid the C heap: its free pages go back once answered."""
    import api.middleware

    answered, trims = [], []
    monkeypatch.setattr(api.middleware, "release_freed_memory", lambda: trims.append(len(answered)))

    async def route(scope, receive, send):
        await read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        answered.append(scope["path"])

    chunk = b"a" * 65536
    app = ReadBodyFirst(route, timeout_s=5)
    asyncio.run(asgi_request(app, "/small", [chunk] * 15))
    assert trims == []
    asyncio.run(asgi_request(app, "/large", [chunk] * (api.middleware.LARGE // len(chunk))))
    assert trims == [2]  # once, after the answer


def test_a_body_budget_under_the_largest_body_refuses_to_start():
    with pytest.raises(ValidationError, match="TEXTBENTO_BODY_BUDGET_BYTES .2048. is under TEXTBENTO_MAX_BODY_BYTES .4096."):
        Settings(body_budget_bytes=2048, max_body_bytes=4096)
    assert Settings(body_budget_bytes=4096, max_body_bytes=4096).body_budget_bytes == 4096


def test_uploads_past_the_workers_body_budget_get_503_not_memory(guarded_server):
    """More uploads of 5 MB at once than the API workers can hold (one each, at 8 MiB): the rest get 503 as their
    bytes arrive, and are counted; those held get 408 at the body deadline, as they never finish."""
    host, port = guarded_server.url.removeprefix("http://").split(":")
    workers = settings.api_workers
    uploads = workers + 4

    async def upload() -> bytes:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(UPLOAD_HEAD.replace(b"8000000", b"6000000") + b"a" * 5_000_000)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=BODY_TIMEOUT_S + 15)
        writer.close()
        return answer

    async def scenario():
        answers = await asyncio.gather(*(upload() for _ in range(uploads)))
        return answers, await lone_latencies(guarded_server.url, 3)  # each asserts its 200

    answers, _ = asyncio.run(scenario())
    refused = [answer for answer in answers if answer.startswith(b"HTTP/1.1 503")]
    print(f"\n{uploads} uploads of 5 MB to {workers} API workers: {len(refused)} refused 503")
    assert len(refused) >= uploads - workers, [answer[:120] for answer in answers]
    for answer in refused:
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"retry-after: 1" in head.lower() and json.loads(body)["error"]["type"] == "body_budget", answer
    assert all(answer.startswith(b"HTTP/1.1 408") for answer in answers if answer not in refused), answers
    metrics = requests.get(f"{guarded_server.url}/metrics", timeout=10).text
    assert float(re.search(r'textbento_rejected_total\{reason="body_budget"\} (\S+)', metrics)[1]) == len(refused)


def test_an_idle_keep_alive_connection_is_closed(guarded_server):
    """After an answer, the connection waits TEXTBENTO_KEEP_ALIVE_S (2 s here) for the next request."""
    host, port = guarded_server.url.removeprefix("http://").split(":")

    async def idle() -> float:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /livez HTTP/1.1\r\nHost: textbento\r\n\r\n")
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        await reader.readexactly(length)
        answered = time.monotonic()
        assert await asyncio.wait_for(reader.read(1), timeout=30) == b""
        writer.close()
        return time.monotonic() - answered

    assert 1.5 < asyncio.run(idle()) < 6


@asynccontextmanager
async def patched_uvicorn(app, protocol: type | str = "httptools", **limits: float) -> AsyncIterator[int]:
    """uvicorn serving ``app`` in this event loop with textbento's connection patches and ``limits``; yields its port.
    ``protocol``: uvicorn's HTTP protocol (a class with its stock methods shows what the patches change)."""
    import uvicorn

    from serving import compat
    from serving.connections import limit_connections

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, http=protocol, log_level="warning", lifespan="off"))
    compat.apply()
    limit_connections(**{"header_timeout_s": 5, "body_timeout_s": 5, "keep_alive_s": 5, **limits})
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await serving


def test_a_body_still_arriving_after_its_answer_is_cut_at_the_body_deadline():
    """An app that answers without reading the body (a 401, a 404): each byte that trickles in after the
    answer stopped uvicorn's keep-alive timer, and the connection was held for as long as the client
    trickled. The body deadline (plus its grace) closes it."""
    from serving.compat.uvicorn_connections import BODY_GRACE_S

    body_timeout_s = 1.0

    async def scenario() -> float:
        async with patched_uvicorn(answers_at_once(401), body_timeout_s=body_timeout_s) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            opened = time.monotonic()
            writer.write(b"POST /v1/embeddings HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n{")
            assert (await asyncio.wait_for(reader.readuntil(b"no"), 5)).startswith(b"HTTP/1.1 401")
            try:
                while time.monotonic() - opened < 15:
                    try:
                        if await asyncio.wait_for(reader.read(1), timeout=0.2) == b"":
                            break  # closed by the server
                    except TimeoutError:
                        writer.write(b" ")
                        await writer.drain()
            except (ConnectionError, OSError):
                pass
            closed_after = time.monotonic() - opened
            writer.close()
            return closed_after

    closed_after = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert body_timeout_s + BODY_GRACE_S - 0.5 < closed_after < body_timeout_s + BODY_GRACE_S + 3


def answers_at_once(status: int):
    """An ASGI app that answers ``status`` without reading the body, as a refusal on the headers does (413, 401)."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"no"})

    return app


async def refused_upload_answer(protocol: type | str = "httptools") -> bytes:
    """What a client reads that sends ``Connection: close`` and 20 MB of body refused on its headers (413): the
    answer, or the error that replaced it."""
    async with patched_uvicorn(answers_at_once(413), protocol, keep_alive_s=2) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/embeddings HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 50000000\r\n\r\n")

        async def upload() -> None:
            try:
                for _ in range(40):  # 20 MB, more than the sockets' buffers hold
                    writer.write(b"a" * 500_000)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass  # the server stopped reading: its answer is what matters

        uploading = asyncio.create_task(upload())
        await asyncio.sleep(0.5)  # the answer is out; megabytes follow it
        try:
            answer = await asyncio.wait_for(reader.read(), 10)
        except (ConnectionError, OSError) as error:
            answer = repr(error).encode()
        uploading.cancel()
        writer.close()
        return answer


def test_a_refused_upload_without_keep_alive_gets_its_answer_not_a_reset():
    """A client that sends ``Connection: close`` and a body refused before it is read (a 413 on its
    Content-Length): closed at once, the server's socket would hold the unread megabytes, and the kernel's
    reset destroyed the answer before the client read it (tests/test_compat.py shows it still does). It
    lingers instead: the answer, FIN, the rest read."""
    answer = asyncio.run(asyncio.wait_for(refused_upload_answer(), 30))
    assert answer.startswith(b"HTTP/1.1 413") and answer.endswith(b"no"), answer[:200]
