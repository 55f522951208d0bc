"""textbento: Hugging Face text models over HTTP: classifiers, rerankers, dense, sparse and multi-vector embedders.

    client ─JSON─▶ TextBento × N workers ──────────────────────▶ Encoder × 1 per served model
                   validate (pydantic), pick the model           adaptive batching across requests
                   tokenize (a long request in a thread)         sort by length, cut, pad, forward
                   merge concurrent requests into shared calls   (ONNX Runtime per-token int8 on CPU
                   scores / labels / base64 ◀── logits or embeddings ── by default)

Routes: OpenAI's embeddings, Cohere's and Jina's rerank, textbento's classify, and
text-embeddings-inference's API (``api/tei_routes.py``). Configuration: ``TEXTBENTO_*`` environment
variables (``serving/settings.py``); ``TEXTBENTO_MODELS`` serves several models side by side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import bentoml
import numpy as np
from fastapi import FastAPI
from starlette.responses import Response

from api import cohere_routes, tei_routes
from api.catalog import Catalog, ServedModel, shown_source
from api.compact import by_type, refuse_unservable
from api.errors import ERROR_RESPONSES, install_error_handlers
from api.middleware import AdmissionLimit, BearerAuth, BodySizeLimit, CancelWhenGone, CountAnswers, JsonBodyOnly, ReadBodyFirst, Utf8Query
from api.options import prompt_for
from api.pipeline import Pipeline
from api.responses import base64_floats, usage
from api.types import (
    ClassifyRequest,
    ClassifyResponse,
    EmbeddingsRequest,
    EmbeddingsResponse,
    ModelCard,
    ModelList,
    MultiVectorRequest,
    MultiVectorResponse,
    RerankRequest,
    RerankResponse,
    SentimentRequest,
    SentimentResponse,
)
from models.backends import load_backend
from models.calibration import load_ranges
from models.cpu import describe as describe_cpu
from models.inference import InferenceThread, Pass, run_passes
from models.postprocess import best_first
from models.spec import ModelSpec
from models.tokenization import TextTokenizer, side_tokenizers
from serving import bentoml_fixes
from serving.coalesce import Coalescer
from serving.connections import limit_connections, open_connections, requests_in_progress
from serving.dispatch import dispatch_when_free
from serving.drain import Drain
from serving.gone import Dropped, Forgetter
from serving.gpus import gpu_share
from serving.hop import LoneCalls, resend_unanswered
from serving.settings import ENCODER_KEEP_ALIVE_S, settings
from serving.telemetry import forget_dead_processes, telemetry
from serving.wire import Text, ids_from_wire, rows_to_wire

dispatch_when_free()  # BentoML's batcher otherwise learns to idle-wait after a burst
bentoml_fixes.apply()  # a JSON schema per answer, a timer per request: serving/bentoml_fixes.py
logger = logging.getLogger("textbento")
# A log line per request costs measurable throughput; errors are still logged.
NO_ACCESS_LOG = {"access": {"enabled": False}}
# BentoML 1.4.40 recycles the client session to a service every 100 requests / 300 s and kills
# the calls in flight on it (HTTP 500 under concurrency, upstream #5540/#5544). Read from the
# callee's config, so it is set on the Encoder.
NEVER_RECYCLE = {"max_requests": 2**62, "max_age": 1e12}
# A lone short text, when the Encoder answers nothing else, is computed on its event loop: the hop
# to the parked inference thread and back and its wake-ups cost a lone request 0.4-0.8 ms (docs/design.md 8).
# The loop is held for one short pass, on a model whose lone pass is short.
LOOP_PASS_TOKENS, LOOP_PASS_S = 128, 0.010


class Encoder:
    """The runner of one model: token ids in, logits or sentence embeddings out, in adaptive batches.
    ``encoder_for`` makes it the BentoML service of each served model: a process, a batch queue and
    a backend of its own, so that a batch never mixes models and one model's crash spares the others."""

    model: bentoml.models.BentoModel

    def __init__(self) -> None:
        self.name = self.model.tag.name
        self.spec = ModelSpec.of(self.model)
        if self.spec.max_length > settings.token_budget:  # a decoder's cap, or one raised with --max-length
            logger.warning(
                "the model reads up to %d tokens per text, past TEXTBENTO_TOKEN_BUDGET (%d): a text that long runs alone, "
                "in a pass of its own length; import it with --max-length to bound that",
                self.spec.max_length,
                settings.token_budget,
            )
        self.thread = InferenceThread()
        self.dropped = Dropped(keep_s=settings.backstop_timeout_s)  # texts of requests given up, or overdue
        # ``auto`` holds its fast graph to fp32 here first, and serves fp32 if it misses the gates.
        self.backend = self.thread.call(load_backend, settings.backend, self.model.path, self.spec, settings.runner_threads)
        telemetry.backend(self.name, self.backend)
        # Warm-up before /readyz turns green: the first forward pass is the slowest (a batch and a lone
        # text: on a CPU they run on sessions of their own, models/backends/onnx_backend.Streams).
        took_s = []
        for texts in (8, 1, 1, 1):
            started = time.perf_counter()
            self.thread.call(self.forward, [np.ones(16, dtype=np.int32)] * texts)
            took_s.append(time.perf_counter() - started)
        self.loop_passes = self.backend.any_thread and min(took_s[2:]) <= LOOP_PASS_S  # the warm lone passes: one hiccup decides nothing
        # On SIGTERM, answer the API workers' last calls before stopping (serving/drain.py).
        self.drain = Drain(quiet_s=1.0, longest_s=settings.drain_longest_s)
        self.drain.postpone_sigterm()
        limit_connections(
            header_timeout_s=settings.header_timeout_s, body_timeout_s=settings.body_timeout_s, keep_alive_s=ENCODER_KEEP_ALIVE_S
        )
        telemetry.sample_held(
            {
                "inference": lambda: self.thread.held,
                "encoder_connections": open_connections,
                "encoder_tasks": lambda: len(asyncio.all_tasks()),
            }
        )

    def forward(
        self, token_ids: list[np.ndarray], wanted: Callable[[list[int]], list[int]] | None = None
    ) -> tuple[list[np.ndarray], list[Pass | None]]:
        return run_passes(self.backend, token_ids, self.spec.pad_id, settings.token_budget, wanted)

    # Per text: (its row, the forward pass that computed it; an empty row and None if nobody waits
    # for it any more), the pickle between the services carrying the tuple as it is. Ids and rows
    # travel as bytes: one chunk per call (serving/wire.py).
    @bentoml.api(batchable=True, max_batch_size=settings.max_batch_size, max_latency_ms=settings.max_latency_ms)
    async def encode(self, token_ids: list[bytes]) -> list[tuple[bytes, Any]]:
        texts = ids_from_wire(token_ids)
        forward = partial(self.forward, [text.ids for text in texts], partial(self.dropped.wanted, texts))
        with self.drain.batch():
            rows, passes = forward() if self.on_the_loop(texts) else await self.thread.run(forward)
        telemetry.passes(self.name, set(passes) - {None})
        return list(zip(rows_to_wire(rows), passes))

    def on_the_loop(self, texts: list[Text]) -> bool:
        """Whether this call's pass runs on the event loop's thread (``LOOP_PASS_TOKENS``): not while other
        calls arrive, whose reading would wait for the pass instead of overlapping it."""
        alone = requests_in_progress() == 1 and self.thread.held == 0
        return self.loop_passes and alone and len(texts) == 1 and len(texts[0].ids) <= LOOP_PASS_TOKENS

    @bentoml.api
    async def forget(self, keys: list[int]) -> None:
        """Requests given up by the API workers: their texts still waiting here are not computed (serving/gone.py)."""
        self.dropped.forget(keys)

    @bentoml.api
    def device(self) -> dict[str, Any]:
        backend = self.backend
        return {
            "backend": backend.name,
            "device": backend.device,
            "precision": backend.precision,
            "fidelity": backend.fidelity.as_dict() if backend.fidelity else None,
            "trials": [trial.as_dict() for trial in backend.trials],
            "cpu": describe_cpu(),
        }


def encoder_for(tag: str, served: int) -> bentoml.Service:
    """The Encoder of the stored model ``tag`` as a BentoML service, one of ``served``: a GPU each, or a share of the first."""
    model = bentoml.models.BentoModel(tag)
    return bentoml.service(
        name="encoder" if served == 1 else f"encoder-{model.tag.name}",
        workers=1,
        resources={"gpu": gpu_share(served)},
        traffic={"timeout": settings.timeout_s},
        logging=NO_ACCESS_LOG,
        runner_connection=NEVER_RECYCLE,
        tracing=settings.tracing,
    )(type("Encoder", (Encoder,), {"model": model}))


ENCODERS = [encoder_for(tag, len(settings.model_tags)) for tag in settings.model_tags]


def serves_each(encoders: list[bentoml.Service]):
    """Per Encoder, its model (``model_0``...: the API workers read its tokenizer) and a ``bentoml.depends``
    (``encoder_0``...), as class attributes: BentoML finds them there, and their number comes from the settings."""

    def add(cls: type) -> type:
        for index, encoder in enumerate(encoders):
            setattr(cls, f"model_{index}", encoder.inner.model)
            setattr(cls, f"encoder_{index}", bentoml.depends(encoder))
        return cls

    return add


# BentoML serves the docs (its /docs merges these routes); FastAPI's own would shadow them.
app = FastAPI(title="textbento", docs_url=None, redoc_url=None, openapi_url=None)
install_error_handlers(app)

app.add_middleware(AdmissionLimit, limit=settings.max_concurrency * len(ENCODERS))  # and per model: ServedModel.admitted
app.add_middleware(ReadBodyFirst, timeout_s=settings.body_timeout_s)  # admission counts from the body's end
app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
app.add_middleware(JsonBodyOnly)
app.add_middleware(Utf8Query)
app.add_middleware(CountAnswers, routes=lambda: app.openapi()["paths"])  # the declared routes
app.add_middleware(CancelWhenGone)
app.include_router(tei_routes.router)  # text-embeddings-inference's API, over the pipeline below
app.include_router(cohere_routes.router)  # Cohere's v2 embed, likewise


@bentoml.service(
    name="textbento",
    workers=settings.workers,
    # BentoML's own 504 is only a backstop: run() answers first, in the API's error shape.
    traffic={"timeout": settings.backstop_timeout_s},
    logging=NO_ACCESS_LOG,
    tracing=settings.tracing,
)
@bentoml.asgi_app(app)
@serves_each(ENCODERS)
class TextBento(Pipeline):
    """The HTTP API and the tokenizer workers; concurrent requests share their calls to each model's Encoder
    (the pipeline of every route: ``api/pipeline.py``)."""

    def __init__(self) -> None:
        if not settings.keys():
            logger.warning("no API key configured (TEXTBENTO_API_KEYS): the API is open to anyone who can reach it")
        limit_connections(
            header_timeout_s=settings.header_timeout_s, body_timeout_s=settings.body_timeout_s, keep_alive_s=settings.keep_alive_s
        )
        forget_dead_processes()  # a SIGKILLed predecessor's requests in flight (then at each sample, below)
        self.models = Catalog([self.model_at(index) for index in range(len(ENCODERS))])
        telemetry.sample_held(
            {
                "coalescer": lambda: sum(model.calls.queued for model in self.models),
                "forgetter": lambda: sum(len(model.forget.sending) for model in self.models),
                "api_connections": open_connections,
                "api_tasks": lambda: len(asyncio.all_tasks()),
            },
            sweep=True,
        )

    def model_at(self, index: int) -> ServedModel:
        """The ``index``-th model as this worker serves it: its tokenizer, and its calls to its Encoder,
        shared by concurrent requests (``serving/coalesce.py``)."""
        model = getattr(self, f"model_{index}")
        stored = ModelSpec.of(model)
        spec = dataclasses.replace(stored, source=shown_source(stored.source))  # what /v1/models and /info show
        # Looked up when first used: the client grows its ``encode`` method only when its connection first opens.
        encoder = lambda: getattr(self, f"encoder_{index}")
        encode = resend_unanswered(
            lambda token_ids: encoder().to_async.encode(token_ids), settings.encoder_attempts, LoneCalls(model.tag.name)
        )
        return ServedModel(
            name=model.tag.name,
            tag=str(model.tag),
            created=int(model.info.creation_time.timestamp()),
            spec=spec,
            tokenizer=TextTokenizer(model.path, spec.max_length),
            calls=Coalescer(encode, max_items=settings.max_batch_size, in_flight=settings.calls_in_flight),
            encoder=encoder,
            forget=Forgetter(lambda keys: encoder().to_async.forget(keys)),
            aliases=frozenset({model.tag.name, str(model.tag), stored.source, spec.source} - {""}),
            max_in_flight=settings.max_concurrency,
            ranges=load_ranges(model.path),
            sides=side_tokenizers(model.path, spec),
        )

    # textbento's own routes, OpenAI's and Cohere's/Jina's shapes.

    @app.post("/v1/classify", response_model=ClassifyResponse, responses=ERROR_RESPONSES)
    async def classify(self, request: ClassifyRequest) -> Response:
        model = self.models.pick(request.model, "classify")
        encoded, logits, timing = await self.run(model, request.inputs, request.truncate, "inputs")
        return self.answer(model, self.classifications(model, encoded, logits, request.top_k, request.raw_scores), timing)

    @app.post("/v1/embeddings", response_model=EmbeddingsResponse, responses=ERROR_RESPONSES)
    async def embeddings(self, request: EmbeddingsRequest) -> Response:
        model = self.models.pick(request.model, "embed")
        refuse_unservable(model, [request.encoding_format], request.dimensions, "encoding_format", "dimensions")
        prompt = prompt_for(model.spec, request.prompt_name, request.prompt)
        vectors, timing = await self.embed(
            model, request.input, "input", prompt=prompt, truncate=request.truncate, dimensions=request.dimensions
        )
        rows = by_type(np.stack(vectors), request.encoding_format, model.ranges)
        return self.answer(model, [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)], timing)

    @app.post("/v1/multivector", response_model=MultiVectorResponse, responses=ERROR_RESPONSES)
    async def multivector(self, request: MultiVectorRequest) -> Response:
        """A multi-vector (ColBERT) model's token vectors of each text, read as a query or a document."""
        model = self.models.pick(request.model, "multivector")
        prompt = prompt_for(model.spec, request.prompt_name, None)
        vectors, timing = await self.multivectors(
            model, request.input, request.input_type, "input", prompt=prompt, truncate=request.truncate
        )
        write = base64_floats if request.encoding_format == "base64" else np.ndarray.tolist
        data = [{"object": "multivector", "index": i, "shape": rows.shape, "embedding": write(rows)} for i, rows in enumerate(vectors)]
        return self.answer(model, data, timing)

    @app.post("/v1/rerank", response_model=RerankResponse, responses=ERROR_RESPONSES)
    async def rerank(self, request: RerankRequest) -> Response:
        """The documents by relevance to the query, best first: each pair scored by the cross-encoder, or
        the query's MaxSim with each document by a multi-vector model."""
        model = self.models.pick(request.model, "rerank")
        relevance, timing = await self.relevance(model, request.query, request.documents, "documents")
        results = [
            {
                "index": i,
                "relevance_score": relevance[i],
                **({"document": {"text": request.documents[i]}} if request.return_documents else {}),
            }
            for i in best_first(relevance)[: request.top_n]
        ]
        return self.timed({"model": model.name, "results": results, "usage": usage(timing.tokens)}, timing)

    @app.get("/v1/models", response_model=ModelList, responses=ERROR_RESPONSES)
    async def model_list(self) -> ModelList:
        devices = await asyncio.gather(*(model.runtime() for model in self.models))
        return ModelList(data=[card(model, device) for model, device in zip(self.models, devices)])

    @app.post("/api/v1/sentiment", response_model=SentimentResponse, responses=ERROR_RESPONSES)
    async def sentiment(self, request: SentimentRequest) -> Response:
        model = self.models.pick(request.model, "classify")
        encoded, logits, timing = await self.run(model, [request.text], True, "inputs")
        (answer,) = self.classifications(model, encoded, logits, None)
        return self.timed({"label": answer["label"], "confidence": answer["score"]}, timing)


if keys := settings.keys():
    # Every path (the docs and the schema too) but the probes, and /metrics unless told otherwise.
    open_paths = ("/livez", "/healthz", "/readyz", *(("/metrics",) if settings.metrics_public else ()))
    TextBento.add_asgi_middleware(BearerAuth, keys=keys, open_paths=open_paths)


def card(model: ServedModel, device: dict[str, Any]) -> ModelCard:
    """A served model's entry in ``/v1/models``: what it is, and how its Encoder serves it."""
    spec = model.spec
    return ModelCard(
        id=model.name,
        created=model.created,
        tag=model.tag,
        task=spec.task,
        labels=list(spec.labels),
        max_length=spec.max_length,
        model_max_length=spec.model_max_length,
        dimensions=spec.dimensions,
        pooling=spec.pooling if spec.task == "embed" else None,
        prompts=spec.prompts,
        default_prompt_name=spec.default_prompt_name,
        source=spec.source,
        **device,
    )
