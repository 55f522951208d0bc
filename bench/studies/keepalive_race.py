"""The failed hop, reproduced alone: uvicorn closes an idle keep-alive connection while a busy
aiohttp client (whose event loop has not yet seen the close) takes it from its pool.

    python -m bench.studies.keepalive_race    # writes bench/results/keepalive-race.json

The same pieces as the API worker → Encoder hop: uvicorn with httptools on a Unix socket, aiohttp's
UnixConnector with its default keep-alive (15 s, as BentoML's client). Each trial sends one call,
then blocks the client's loop past the server's keep-alive (as a busy API worker's loop is blocked
by its other work), then sends the next call on the pooled connection. With the server's
keep-alive shorter than the client's (BentoML's default for the Encoder: 5 s; 1 s here, to be
quick) the second call fails before any answer; with it longer (serving/connections.py) it cannot.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import threading
import time

import aiohttp
import uvicorn

from bench import write_result


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def start_server(path: str, keep_alive_s: int) -> uvicorn.Server:
    config = uvicorn.Config(app, uds=path, http="httptools", timeout_keep_alive=keep_alive_s, log_level="error", lifespan="off")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return server


async def trials(path: str, count: int, blocked_s: float) -> dict[str, int]:
    outcomes: dict[str, int] = {}
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path)) as session:
        for _ in range(count):
            async with session.post("http://encoder/encode", data=b"x" * 4096) as response:
                await response.read()
            time.sleep(blocked_s)  # the loop is busy: the server's close is not seen yet
            try:
                async with session.post("http://encoder/encode", data=b"x" * 4096) as response:
                    await response.read()
                    outcome = str(response.status)
            except aiohttp.ClientError as error:
                outcome = repr(error)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


def main() -> int:
    results = {"command": " ".join(["python -m bench.studies.keepalive_race", *sys.argv[1:]])}
    for label, keep_alive_s in (("server keep-alive 1 s < client's 15 s", 1), ("server keep-alive 60 s > client's 15 s", 60)):
        path = os.path.join(tempfile.mkdtemp(), "encoder.sock")
        server = start_server(path, keep_alive_s)
        results[label] = asyncio.run(trials(path, count=10, blocked_s=1.3))
        server.should_exit = True
        print(f"{label}: {results[label]}")
    write_result("keepalive-race.json", results, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
