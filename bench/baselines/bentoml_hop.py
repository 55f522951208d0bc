"""Floors with nothing to compute: BentoML's stack as textbento runs it (its corrections applied, no access
log), answering a one-text embeddings request with a fixed 384-float vector (``bench.hop``).

- ``Solo``: one service, the answer in the endpoint: HTTP in and out.
- ``Hop``: an API service calling a batchable dependency in a process of its own, as textbento's API
  workers call their Encoder: HTTP in, the hop and BentoML's batcher, HTTP out. The dependency is named
  ``encoder`` so that the benchmarks' CPU split (``harness.serving.cpu_seconds``) reads it as one.
- ``MountedHop``: the same hop from a route of a FastAPI app mounted in the service, as textbento's routes are.
"""

from __future__ import annotations

import bentoml
from fastapi import FastAPI

from serving import compat
from serving.compat import NEVER_RECYCLE

compat.apply()
QUIET = {"access": {"enabled": False}}
ROW = bytes(384 * 4)  # one float32 vector, as the Encoder returns it (serving/wire.py)
IDS = [bytes(32)]  # one text's token ids


def answer(row: bytes) -> dict:
    return {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.0] * (len(row) // 4)}]}


@bentoml.service(name="encoder", workers=1, logging=QUIET, runner_connection=NEVER_RECYCLE)
class Rows:
    @bentoml.api(batchable=True, max_batch_size=64, max_latency_ms=60_000)
    async def encode(self, token_ids: list[bytes]) -> list[bytes]:
        return [ROW] * len(token_ids)


@bentoml.service(logging=QUIET)
class Hop:
    rows = bentoml.depends(Rows)

    @bentoml.api(route="/v1/embeddings")
    async def embeddings(self, input: list[str], model: str = "") -> dict:
        (row,) = await self.rows.to_async.encode(IDS)
        return answer(row)


app = FastAPI()


@app.post("/v1/embeddings")
async def embeddings(body: dict) -> dict:
    (row,) = await app.state.rows.to_async.encode(IDS)
    return answer(row)


@bentoml.service(logging=QUIET)
@bentoml.asgi_app(app)
class MountedHop:
    rows = bentoml.depends(Rows)

    def __init__(self) -> None:
        app.state.rows = self.rows


@bentoml.service(logging=QUIET)
class Solo:
    @bentoml.api(route="/v1/embeddings")
    async def embeddings(self, input: list[str], model: str = "") -> dict:
        return answer(ROW)
