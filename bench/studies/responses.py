"""The cost of writing one answer: FastAPI's way (pydantic models, validation against the
``response_model``, its encoder, ``json.dumps``) against ``api.responses.json_response``.

    python -m bench.studies.responses    # → bench/results/responses.json

One /v1/embeddings answer with one 384-float vector, best of 5 runs of 300, in process.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import numpy as np
from fastapi.responses import JSONResponse
from fastapi.routing import serialize_response
from fastapi.utils import create_model_field

from api.responses import json_response, usage
from api.types import Embedding, EmbeddingsResponse, Usage
from bench import RESULTS, write_result

VECTOR = np.random.default_rng(0).random(384, dtype=np.float32)
FIELD = create_model_field(name="response", type_=EmbeddingsResponse, mode="serialization")


async def through_fastapi() -> bytes:
    answer = EmbeddingsResponse(
        data=[Embedding(index=0, embedding=VECTOR.tolist())], model="m", usage=Usage(prompt_tokens=5, total_tokens=5)
    )
    return JSONResponse(await serialize_response(field=FIELD, response_content=answer, is_coroutine=True)).body


async def straight() -> bytes:
    payload = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": VECTOR.tolist()}],
        "model": "m",
        "usage": usage(5),
    }
    return json_response(payload).body


def microseconds(write: Callable, runs: int = 300) -> float:
    async def loop() -> float:
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(runs):
                await write()
            best = min(best, (time.perf_counter() - started) / runs)
        return best * 1e6

    return round(asyncio.run(loop()), 1)


def main() -> None:
    assert json.loads(asyncio.run(through_fastapi())) == json.loads(asyncio.run(straight()))
    report = {
        "answer": "one embedding, 384 floats",
        "fastapi_us": microseconds(through_fastapi),
        "json_response_us": microseconds(straight),
    }
    RESULTS.mkdir(exist_ok=True)
    write_result("responses.json", report, indent=2)
    print(report)


if __name__ == "__main__":
    main()
