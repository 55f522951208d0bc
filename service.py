"""textbento: Hugging Face text classification and sentence embeddings over HTTP.

    client ─JSON─▶ TextBento × N workers ──────────────────────▶ Encoder × 1 per device
                   validate (pydantic)                           adaptive batching across requests
                   tokenize in a thread, never on the loop       sort by length, cut, pad, forward
                   merge concurrent requests into shared calls   (ONNX Runtime per-token int8 on CPU
                   scores / labels / base64 ◀── logits or embeddings ── by default)

Configuration: ``TEXTBENTO_*`` environment variables (``serving/settings.py``).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from typing import Any

import bentoml
import numpy as np
from fastapi import FastAPI
from starlette.responses import Response

from api.errors import ERROR_RESPONSES, APIError, install_error_handlers
from api.limits import check_sizes, refuse_truncated
from api.middleware import AdmissionLimit, BearerAuth, BodySizeLimit, CountAnswers, JsonBodyOnly
from api.options import check_dimensions, prompt_for
from api.responses import json_response, usage
from api.types import (
    ClassifyRequest,
    ClassifyResponse,
    EmbeddingsRequest,
    EmbeddingsResponse,
    EmbedSparseRequest,
    EmbedSparseResponse,
    ModelCard,
    ModelList,
    RerankRequest,
    RerankResponse,
    SentimentRequest,
    SentimentResponse,
)
from models.backends import load_backend
from models.cpu import describe as describe_cpu
from models.inference import InferenceThread, Pass, run_passes
from models.postprocess import ranked_labels, scores, sparse_entries, truncate_dimensions
from models.spec import ModelSpec
from models.tokenization import Encoded, TextInput, TextTokenizer
from serving.coalesce import Coalescer
from serving.connections import limit_connections
from serving.dispatch import dispatch_when_free
from serving.drain import Drain
from serving.hop import resend_unanswered
from serving.settings import ENCODER_KEEP_ALIVE_S, settings
from serving.telemetry import Timing, forget_dead_processes, telemetry
from serving.wire import ids_from_wire, ids_to_wire, rows_from_wire, rows_to_wire

dispatch_when_free()  # BentoML's batcher otherwise learns to idle-wait after a burst
MODEL = bentoml.models.BentoModel(settings.model)
logger = logging.getLogger("textbento")
# A log line per request costs measurable throughput; errors are still logged.
NO_ACCESS_LOG = {"access": {"enabled": False}}
# BentoML 1.4.40 recycles the client session to a service every 100 requests / 300 s and kills
# the calls in flight on it (HTTP 500 under concurrency, upstream #5540/#5544). Read from the
# callee's config, so it is set on the Encoder.
NEVER_RECYCLE = {"max_requests": 2**62, "max_age": 1e12}


@bentoml.service(
    name="encoder",
    workers=1,
    resources={"gpu": 1},
    traffic={"timeout": settings.timeout_s},
    logging=NO_ACCESS_LOG,
    runner_connection=NEVER_RECYCLE,
    tracing=settings.tracing,
)
class Encoder:
    """The runner: token ids in, logits or sentence embeddings out, in adaptive batches."""

    model = MODEL

    def __init__(self) -> None:
        self.spec = ModelSpec.of(self.model)
        if self.spec.max_length > settings.token_budget:  # decoders: up to 32,768 tokens unless imported with --max-length
            logger.warning(
                "the model reads up to %d tokens per text, past TEXTBENTO_TOKEN_BUDGET (%d): a text that long runs alone, "
                "in a pass of its own length; import it with --max-length to bound that",
                self.spec.max_length,
                settings.token_budget,
            )
        self.thread = InferenceThread()
        # ``auto`` holds its fast graph to fp32 here first, and serves fp32 if it misses the gates.
        self.backend = self.thread.call(load_backend, settings.backend, self.model.path, self.spec, settings.runner_threads)
        telemetry.backend(self.backend)
        # Warm-up before /readyz turns green: the first forward pass is the slowest.
        self.thread.call(self.forward, [np.ones(16, dtype=np.int32)] * 8)
        # On SIGTERM, answer the API workers' last calls before stopping (serving/drain.py).
        self.drain = Drain(quiet_s=1.0, longest_s=settings.drain_longest_s)
        self.drain.postpone_sigterm()
        limit_connections(header_timeout_s=settings.header_timeout_s, keep_alive_s=ENCODER_KEEP_ALIVE_S)

    def forward(self, token_ids: list[np.ndarray]) -> tuple[list[np.ndarray], list[Pass]]:
        return run_passes(self.backend, token_ids, self.spec.pad_id, settings.token_budget)

    # Per text: (its row, the forward pass that computed it), the pickle between the services
    # carrying the tuple as it is. Ids and rows travel as bytes: one chunk per call (serving/wire.py).
    @bentoml.api(batchable=True, max_batch_size=settings.max_batch_size, max_latency_ms=settings.max_latency_ms)
    async def encode(self, token_ids: list[bytes]) -> list[tuple[bytes, Any]]:
        with self.drain.batch():
            rows, passes = await self.thread.run(self.forward, ids_from_wire(token_ids))
        telemetry.passes(set(passes))
        return list(zip(rows_to_wire(rows), passes))

    @bentoml.api
    def device(self) -> dict[str, Any]:
        fidelity = self.backend.fidelity.as_dict() if self.backend.fidelity else None
        backend = self.backend
        return {
            "backend": backend.name,
            "device": backend.device,
            "precision": backend.precision,
            "fidelity": fidelity,
            "cpu": describe_cpu(),
        }


# BentoML serves the docs (its /docs merges these routes); FastAPI's own would shadow them.
app = FastAPI(title="textbento", docs_url=None, redoc_url=None, openapi_url=None)
install_error_handlers(app)
app.add_middleware(AdmissionLimit, limit=settings.max_concurrency)
app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
app.add_middleware(JsonBodyOnly)
app.add_middleware(CountAnswers, routes=lambda: app.openapi()["paths"])  # the declared routes


@bentoml.service(
    name="textbento",
    workers=settings.workers,
    # BentoML's own 504 is only a backstop: run() answers first, in the API's error shape.
    traffic={"timeout": settings.backstop_timeout_s},
    logging=NO_ACCESS_LOG,
    tracing=settings.tracing,
)
@bentoml.asgi_app(app)
class TextBento:
    """The HTTP API and the tokenizer workers; concurrent requests share their calls to the Encoder."""

    encoder = bentoml.depends(Encoder)
    model = MODEL

    def __init__(self) -> None:
        if not settings.keys():
            logger.warning("no API key configured (TEXTBENTO_API_KEYS): the API is open to anyone who can reach it")
        limit_connections(header_timeout_s=settings.header_timeout_s, keep_alive_s=settings.keep_alive_s)
        forget_dead_processes()  # a SIGKILLed predecessor's requests in flight
        self.spec = ModelSpec.of(self.model)
        self.tokenizer = TextTokenizer(self.model.path, self.spec.max_length)
        self.aliases = {None, self.model.tag.name, str(self.model.tag), self.spec.source}
        # A lambda: the client grows its ``encode`` method only when its connection first opens.
        encode = resend_unanswered(lambda token_ids: self.encoder.to_async.encode(token_ids), settings.encoder_attempts)
        self.encoder_calls = Coalescer(encode, max_items=settings.max_batch_size, in_flight=settings.calls_in_flight)

    async def run(self, texts: list[TextInput], task: str, truncate: bool, param: str) -> tuple[list[Encoded], list[np.ndarray], Timing]:
        """Check, tokenize off the event loop, then encode; the texts share calls to the Encoder
        with other requests' texts (``serving/coalesce.py``). Timed for the answer's headers."""
        if task != self.spec.task:
            raise APIError(400, "wrong_task", f"the served model {self.model.tag.name!r} does {self.spec.task!r}, not {task!r}")
        check_sizes(texts, param, settings.max_inputs, settings.max_chars)
        timing = Timing(texts=len(texts))
        try:
            async with asyncio.timeout(settings.timeout_s):
                encoded = await self.tokenize(texts)
                timing.tokenized, timing.tokens = time.time(), sum(e.tokens for e in encoded)
                if not truncate:
                    refuse_truncated(encoded, param, self.spec.max_length)
                carried = await self.encoder_calls.submit(ids_to_wire([e.ids for e in encoded]))
        except TimeoutError:
            raise APIError(504, "timeout", f"not answered within {settings.timeout_s} s", retry_after=1) from None
        timing.encoded, timing.passes = time.time(), [Pass(*forward) for forward in {forward for _, forward in carried}]
        return encoded, rows_from_wire([row for row, _ in carried]), timing

    async def tokenize(self, texts: list[TextInput]) -> list[Encoded]:
        return await asyncio.to_thread(self.tokenizer.encode, texts)

    def check_model(self, name: str | None) -> None:
        if name not in self.aliases:
            raise APIError(
                404, "model_not_found", f"model {name!r} is not served here; this server serves {self.model.tag.name!r}", "model"
            )

    def answer(self, data: list[dict], timing: Timing) -> Response:
        """The list answer of the routes, straight to JSON (``api/responses.py``)."""
        return self.timed({"object": "list", "data": data, "model": self.model.tag.name, "usage": usage(timing.tokens)}, timing)

    def timed(self, payload: dict, timing: Timing) -> Response:
        """``payload`` with the timing headers; the request's metrics and spans recorded."""
        timing.answered = time.time()
        telemetry.request(timing)
        return json_response(payload, headers=timing.headers())

    def classifications(self, encoded: list[Encoded], logits: list[np.ndarray], top_k: int | None, raw: bool = False) -> list[dict]:
        """One answer per text: its best label and score, and the ``top_k`` best when asked for."""
        data = []
        for index, (row, e) in enumerate(zip(logits, encoded)):
            ranked = ranked_labels(row if raw else scores(row, self.spec.activation), self.spec.labels, top_k or 1)
            top = [{"label": label, "score": score} for label, score in ranked] if top_k else None
            data.append({"index": index, "label": ranked[0][0], "score": ranked[0][1], "scores": top, "truncated": e.truncated})
        return data

    @app.post("/v1/classify", response_model=ClassifyResponse, responses=ERROR_RESPONSES)
    async def classify(self, request: ClassifyRequest) -> Response:
        encoded, logits, timing = await self.run(request.inputs, "classify", request.truncate, "inputs")
        return self.answer(self.classifications(encoded, logits, request.top_k, request.raw_scores), timing)

    @app.post("/v1/embeddings", response_model=EmbeddingsResponse, responses=ERROR_RESPONSES)
    async def embeddings(self, request: EmbeddingsRequest) -> Response:
        self.check_model(request.model)
        check_dimensions(self.spec, request.dimensions)
        prompt = prompt_for(self.spec, request.prompt_name, request.prompt)
        _, vectors, timing = await self.run([prompt + text for text in request.input], "embed", request.truncate, "input")
        encode = base64_floats if request.encoding_format == "base64" else np.ndarray.tolist
        vectors = [truncate_dimensions(vector, request.dimensions, self.spec.normalize) for vector in vectors]
        return self.answer([{"object": "embedding", "index": i, "embedding": encode(vector)} for i, vector in enumerate(vectors)], timing)

    @app.post("/embed_sparse", response_model=EmbedSparseResponse, responses=ERROR_RESPONSES)
    async def embed_sparse(self, request: EmbedSparseRequest) -> Response:
        """SPLADE's sparse vectors in text-embeddings-inference's shape: per text, its non-zero ``{index, value}``."""
        prompt = prompt_for(self.spec, request.prompt_name, None)
        _, vectors, timing = await self.run([prompt + text for text in request.inputs], "sparse", request.truncate, "inputs")
        return self.timed([sparse_entries(vector) for vector in vectors], timing)

    @app.post("/v1/rerank", response_model=RerankResponse, responses=ERROR_RESPONSES)
    async def rerank(self, request: RerankRequest) -> Response:
        """The documents by relevance to the query: each pair scored by the cross-encoder, best first."""
        self.check_model(request.model)
        if self.spec.task == "classify" and len(self.spec.labels) != 1:
            raise APIError(
                400,
                "wrong_task",
                f"the served model {self.model.tag.name!r} has {len(self.spec.labels)} labels; a reranker (cross-encoder) has one",
                "model",
            )
        pairs = [(request.query, document) for document in request.documents]
        _, logits, timing = await self.run(pairs, "classify", True, "documents")
        relevance = [float(scores(row, self.spec.activation)[0]) for row in logits]
        best_first = sorted(range(len(pairs)), key=lambda index: -relevance[index])[: request.top_n]
        results = [
            {"index": i, "relevance_score": relevance[i], **({"document": {"text": pairs[i][1]}} if request.return_documents else {})}
            for i in best_first
        ]
        return self.timed({"model": self.model.tag.name, "results": results, "usage": usage(timing.tokens)}, timing)

    @app.get("/v1/models", response_model=ModelList, responses=ERROR_RESPONSES)
    async def models(self) -> ModelList:
        device = await self.encoder.to_async.device()
        card = ModelCard(
            id=self.model.tag.name,
            created=int(self.model.info.creation_time.timestamp()),
            tag=str(self.model.tag),
            task=self.spec.task,
            labels=list(self.spec.labels),
            max_length=self.spec.max_length,
            dimensions=self.spec.dimensions,
            pooling=self.spec.pooling if self.spec.task == "embed" else None,
            prompts=self.spec.prompts,
            default_prompt_name=self.spec.default_prompt_name,
            source=self.spec.source,
            **device,
        )
        return ModelList(data=[card])

    @app.post("/api/v1/sentiment", response_model=SentimentResponse, responses=ERROR_RESPONSES)
    async def sentiment(self, request: SentimentRequest) -> Response:
        encoded, logits, timing = await self.run([request.text], "classify", True, "inputs")
        (answer,) = self.classifications(encoded, logits, None)
        return self.timed({"label": answer["label"], "confidence": answer["score"]}, timing)


if keys := settings.keys():
    routes = ("/v1/", "/api/", "/embed_sparse")  # every route that runs the model
    protected = routes if settings.metrics_public else (*routes, "/metrics")
    TextBento.add_asgi_middleware(BearerAuth, keys=keys, protected=protected)


def base64_floats(vector: np.ndarray) -> str:
    """OpenAI's base64 encoding: the little-endian float32 bytes of the vector."""
    return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
