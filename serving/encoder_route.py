"""The Encoder's calls on one raw route: ``POST /encode``, a frame of texts in, a frame of answers out.

A call between two of textbento's own processes needs no schema: BentoML's API path parsed each call
with its serde and pydantic IO models on both sides (a pickle, a validation, an IO model per answer),
1.8 ms from the API worker's send to the Encoder's batcher and 1.1 ms back at c=1 (docs/design.md 8).
This route keeps what a call does need of BentoML and skips the rest: the Encoder's socket (held by
BentoML's arbiter across restarts), its middlewares (metrics, timeout, concurrency), its process
supervision, and its adaptive batcher (``serving.compat.batcher``: calls merged into batches, the
oldest shed with 503 when it would wait past ``max_latency_ms``); the API workers post on the pooled
connections of BentoML's own client to the Encoder (``serving.compat.session_of``), so the hop's
resend rules (``serving/hop.py``) read the same errors.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from http import HTTPStatus
from typing import Any, NoReturn

import numpy as np
from bentoml.exceptions import BentoMLException
from starlette.applications import Starlette
from starlette.routing import Route

from models.inference import Pass

from .compat import batcher, session_of
from .telemetry import telemetry
from .wire import BadFrame, Text, answer_from_wire, answer_to_wire, frame, ids_from_wire, unframe

PATH = "/encode"
FRAMED = {"Content-Type": "application/octet-stream"}
logger = logging.getLogger("textbento")

Encode = Callable[[list[Text]], Awaitable[tuple[list[np.ndarray], list[Pass | None]]]]


class Overloaded(Exception):
    """The batcher shed a call: it would have waited past ``max_latency_ms``."""


def shed() -> NoReturn:
    raise Overloaded("the Encoder's batcher is overloaded")


class EncoderRoute:
    """``POST /encode`` of one Encoder process, as a raw ASGI app; answers 503 until ``serve`` is called."""

    def __init__(self) -> None:
        self.batched: Callable[[list[Text]], Awaitable[list[tuple[np.ndarray, Pass | None]]]] | None = None

    def app(self) -> Starlette:
        """The route as an app to mount on the Encoder's service (at ``/``: BentoML matches a mounted
        Starlette app only where one of its routes does, so every other path stays BentoML's)."""
        return Starlette(routes=[Route(PATH, self, methods=["POST"])])

    def serve(self, model: str, encode: Encode, max_batch_size: int, max_latency_ms: float) -> None:
        """``model``'s calls answered by ``encode`` (a batch of texts → their rows and passes), in batches of calls."""

        async def each_call(calls: Sequence[list[Text]]) -> list[list[tuple[np.ndarray, Pass | None]]]:
            telemetry.batch(model, len(calls))
            rows, passes = await encode([text for call in calls for text in call])
            answers, start = [], 0
            for call in calls:
                answers.append(list(zip(rows[start : start + len(call)], passes[start : start + len(call)])))
                start += len(call)
            return answers

        self.batched = batcher(max_batch_size, max_latency_ms, shed)(each_call)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        try:
            texts = ids_from_wire(unframe(b"".join(chunks)))
        except (BadFrame, ValueError) as error:
            return await respond(send, HTTPStatus.BAD_REQUEST, str(error).encode())
        if self.batched is None:
            return await respond(send, HTTPStatus.SERVICE_UNAVAILABLE, b"the Encoder is not serving yet")
        try:
            answers = await self.batched(texts)
        except Overloaded as error:
            return await respond(send, HTTPStatus.SERVICE_UNAVAILABLE, str(error).encode())
        except Exception:
            logger.exception("an Encoder call failed")
            return await respond(send, HTTPStatus.INTERNAL_SERVER_ERROR, b"the Encoder failed; see its log")
        rows, passes = zip(*answers) if answers else ((), ())
        await respond(send, HTTPStatus.OK, answer_to_wire(rows, passes))


async def respond(send: Any, status: HTTPStatus, body: bytes) -> None:
    headers = [(b"content-type", FRAMED["Content-Type"].encode() if status == HTTPStatus.OK else b"text/plain; charset=utf-8")]
    await send({"type": "http.response.start", "status": int(status), "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def encoder_calls(client: Callable[[], Any]) -> Callable[[list[bytes]], Awaitable[list[tuple[memoryview, Pass | None]]]]:
    """A call to the Encoder whose BentoML client ``client()`` returns: texts on the wire (``serving.wire.ids_to_wire``)
    in, each one's row and pass out; an answer that is not 200 raises ``BentoMLException`` with its status, as BentoML's client does."""

    async def call(texts: list[bytes]) -> list[tuple[memoryview, Pass | None]]:
        session = await session_of(client())
        async with session.post(PATH, data=frame(texts), headers=FRAMED) as answer:
            body = await answer.read()
            if answer.status != HTTPStatus.OK:
                raise BentoMLException(body.decode(errors="replace"), error_code=HTTPStatus(answer.status))
        return answer_from_wire(body)

    return call
