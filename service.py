"""textbento: Hugging Face text models over HTTP: classifiers, rerankers, dense, sparse and multi-vector embedders.

    client ─JSON─▶ TextBento × N workers ──────────────────────▶ Encoder × 1 per served model
                   validate (pydantic), pick the model           adaptive batching across requests
                   tokenize (a long request in a thread)         sort by length, cut, pad, forward
                   merge concurrent requests into shared calls   (ONNX Runtime per-token int8 on CPU
                   scores / labels / base64 ◀── logits or embeddings ── by default)

Routes (``api/routes/``): OpenAI's embeddings, Cohere's embed and Cohere's/Jina's rerank, text-embeddings-
inference's API and textbento's classify. Configuration: ``TEXTBENTO_*`` environment variables
(``serving/settings.py``); ``TEXTBENTO_MODELS`` serves several models side by side.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

import bentoml
from fastapi import FastAPI

from api.catalog import Catalog, served_model
from api.errors import install_error_handlers
from api.middleware import guard, protect
from api.pipeline import Pipeline
from api.routes import ROUTERS
from models.engine import Engine
from models.memory import return_large_buffers
from models.spec import ModelSpec
from serving import compat, socket_hop
from serving.compat import NEVER_RECYCLE, batcher
from serving.connections import limit_connections, open_connections
from serving.drain import Drain
from serving.gone import Dropped
from serving.settings import ENCODER_KEEP_ALIVE_S, settings
from serving.telemetry import forget_dead_processes, telemetry
from serving.wire import ids_from_wire, rows_to_wire
from serving.wiring import depends_on_each, encoder_service, encoders_of

compat.apply()  # BentoML's and uvicorn's internals, corrected for the versions pinned (serving/compat/)
logger = logging.getLogger("textbento")
NO_ACCESS_LOG = {"access": {"enabled": False}}  # a log line per request costs measurable throughput; errors are still logged


class Encoder:
    """One served model's forward passes, in adaptive batches across the API workers' calls: token ids in,
    logits, sentence embeddings or token vectors out. A BentoML service per model (``encoder_service``):
    a process, a batch queue and a backend of its own, so a batch never mixes models and one model's crash spares the others."""

    model: bentoml.models.BentoModel  # the stored model it serves, set per service

    def __init__(self) -> None:
        self.name = self.model.tag.name
        spec, threads = ModelSpec.of(self.model), settings.runner_threads
        self.engine = Engine(self.model.path, spec, settings.backend, threads, settings.token_budget, settings.trust_remote_code)
        self.dropped = Dropped(keep_s=settings.backstop_timeout_s)  # texts of requests given up, or overdue
        # on SIGTERM, the Encoder stays until its callers (the API workers' connections) are gone
        self.drain = Drain(quiet_s=1.0, longest_s=settings.drain_longest_s, callers=open_connections)
        self.drain.postpone_sigterm()
        limit_connections(
            header_timeout_s=settings.header_timeout_s, body_timeout_s=settings.body_timeout_s, keep_alive_s=ENCODER_KEEP_ALIVE_S
        )
        telemetry.backend(self.name, self.engine.backend)
        # The API workers' calls, on a Unix socket of its own too, into the same batcher (serving/socket_hop.py).
        self.socket = socket_hop.Listening(self.name, batcher("encode"))
        telemetry.sample_held(
            {
                "inference": lambda: self.engine.thread.held,
                "encoder_connections": open_connections,
                "encoder_tasks": lambda: len(asyncio.all_tasks()),
            }
        )

    # Per text: its row and the pass that computed it (an empty row and None if nobody waits for it any more).
    # Ids and rows travel as bytes, one chunk per call (serving/wire.py).
    @bentoml.api(batchable=True, max_batch_size=settings.max_batch_size, max_latency_ms=settings.max_latency_ms)
    async def encode(self, token_ids: list[bytes]) -> list[tuple[bytes, Any]]:
        texts = ids_from_wire(token_ids)
        with self.drain.batch():
            rows, passes = await self.engine.run([text.ids for text in texts], partial(self.dropped.wanted, texts))
        telemetry.passes(self.name, set(passes) - {None})
        return list(zip(rows_to_wire(rows), passes))

    @bentoml.api
    async def forget(self, keys: list[int]) -> None:
        """Requests given up by the API workers: their texts still waiting here are not computed (serving/gone.py)."""
        self.dropped.forget(keys)

    @bentoml.api
    def runtime(self) -> dict[str, Any]:
        return self.engine.card()

    @bentoml.on_shutdown
    def stop_listening(self) -> None:
        self.socket.close()


ENCODERS = [
    encoder_service(
        Encoder,
        tag,
        served=len(settings.model_tags),
        traffic={"timeout": settings.timeout_s},
        logging=NO_ACCESS_LOG,
        runner_connection=NEVER_RECYCLE,
        tracing=settings.tracing,
    )
    for tag in settings.model_tags
]

# BentoML serves the docs (its /docs merges these routes); FastAPI's own would shadow them.
app = FastAPI(title="textbento", docs_url=None, redoc_url=None, openapi_url=None)
install_error_handlers(app)
guard(app)  # body size and deadline, JSON only, UTF-8 queries, answers counted, work cancelled for clients gone
for router in ROUTERS:
    app.include_router(router)


@bentoml.service(
    name="textbento",
    workers=settings.workers,
    traffic={"timeout": settings.backstop_timeout_s},  # BentoML's own 504 is a backstop: each route's deadline answers first
    logging=NO_ACCESS_LOG,
    tracing=settings.tracing,
)
@bentoml.asgi_app(app)
@depends_on_each(ENCODERS)
class TextBento:
    """The HTTP API and the tokenizer workers; concurrent requests share their calls to each model's Encoder."""

    def __init__(self) -> None:
        if not settings.keys():
            logger.warning("no API key configured (TEXTBENTO_API_KEYS): the API is open to anyone who can reach it")
        limit_connections(
            header_timeout_s=settings.header_timeout_s, body_timeout_s=settings.body_timeout_s, keep_alive_s=settings.keep_alive_s
        )
        forget_dead_processes()  # a SIGKILLed predecessor's requests in flight (then at each sample, below)
        return_large_buffers()  # a large upload's or answer's memory goes back to the system once sent (models/memory.py)
        models = Catalog([served_model(model, encoder) for model, encoder in encoders_of(self)])
        app.state.pipeline = Pipeline(models)  # the routes' dependency (api/pipeline.py)
        telemetry.sample_held(
            {
                "coalescer": lambda: sum(model.calls.queued for model in models),
                "forgetter": lambda: sum(len(model.forget.sending) for model in models),
                "api_connections": open_connections,
                "api_tasks": lambda: len(asyncio.all_tasks()),
            },
            sweep=True,
        )


protect(TextBento)  # with the keys set, a bearer key on every path but the probes (and /metrics, unless told otherwise)
