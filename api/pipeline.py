"""The request pipeline every route runs on, whatever its API's shape: check the texts, tokenize
them (off the event loop unless short), send their ids through the model's shared calls to its Encoder, and
answer with the timing headers. ``service.py``'s ``TextBento`` is one (its routes are OpenAI's,
Cohere's/Jina's and textbento's); ``api/tei_routes.py`` runs TEI's routes on the same instance.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from starlette.responses import Response

from models.inference import Pass
from models.postprocess import maxsim, ranked_labels, scores, token_vectors, truncate_dimensions
from models.tokenization import Encoded, QueryAndDocuments, Side, TextInput
from serving.coalesce import Overloaded
from serving.gone import deadline, new_key
from serving.settings import settings
from serving.telemetry import Timing, telemetry
from serving.wire import ids_to_wire, rows_from_wire

from .catalog import Catalog, ServedModel
from .errors import APIError
from .limits import check_answer_size, check_sizes, input_named, refuse_truncated
from .options import check_dimensions
from .responses import json_response, usage

# A request of at most this many characters is tokenized on the event loop: 500 characters take
# about 0.18 ms, less than handing them to a thread and back (docs/design.md 8). A longer one goes
# to a thread, so that no request holds the loop for long.
INLINE_CHARS = 500
logger = logging.getLogger("textbento")


async def tokenize(tokenizer: Any, texts: list[TextInput], chars: int, cut: str, max_tokens: int | None) -> list[Encoded]:
    """``texts`` tokenized on the event loop when they hold at most ``INLINE_CHARS`` characters in all, else on a thread."""
    if chars <= INLINE_CHARS:
        return tokenizer.encode(texts, cut, max_tokens)
    return await asyncio.to_thread(tokenizer.encode, texts, cut, max_tokens)


def overdue(due: float, started: float) -> APIError:
    return APIError(504, "timeout", f"not answered within its deadline ({due - started:.3g} s)", retry_after=1)


def refuse_non_finite(model: ServedModel, rows: list[np.ndarray], param: str, query_param: str | None = None) -> None:
    """500 naming the first input whose output holds NaN or infinity. JSON has no such numbers (written,
    they would make the answer invalid JSON), the fault is the model's, and the same text would fail again:
    neither a client error nor a retryable one (text-embeddings-inference answers a NaN score as a backend error)."""
    broken = next((index for index, row in enumerate(rows) if not np.isfinite(row).all()), None)
    if broken is not None:
        where, name = input_named(broken, param, query_param)
        logger.error("model %r computed a non-finite output for %s", model.name, name)
        message = f"model {model.name!r} computed a non-finite value (NaN or infinity) for {where}; sent again, it would do so again"
        raise APIError(500, "non_finite_output", message, name)


class Pipeline:
    """What a route needs: the served models, and the steps from texts to an answer."""

    models: Catalog

    @asynccontextmanager
    async def admitted(self, model: ServedModel, started: float) -> AsyncIterator[float]:
        """A request's turn with ``model``: admitted (429 past its share of the worker: ``ServedModel.admitted``)
        until its deadline (``serving/gone.py``: the client's, else ``timeout_s`` after ``started``), then 504.
        Yields the deadline; every route that reads texts runs within it."""
        due = deadline.get() or started + settings.timeout_s
        if due <= started:
            raise overdue(due, started)
        try:
            with model.admitted():
                async with asyncio.timeout(due - time.time()):
                    yield due
        except TimeoutError:
            raise overdue(due, started) from None

    async def run(
        self,
        model: ServedModel,
        texts: list[TextInput],
        truncate: bool,
        param: str,
        cut: str = "right",
        max_tokens: int | None = None,
        tokenizer: Any = None,
        query_param: str | None = None,
        values_per_token: int | None = None,
    ) -> tuple[list[Encoded], list[np.ndarray], Timing]:
        """Check, tokenize (off the event loop unless short: ``INLINE_CHARS``; in at most ``max_tokens``
        a text, the model's limit without it; with ``tokenizer`` where not the model's own: a
        multi-vector model's query or document side), then encode; the texts share calls to the
        model's Encoder with other requests' texts. Timed for the answer's headers. With ``query_param``
        the first text is a query beside the list ``param`` names (``api/limits.py``); with
        ``values_per_token``, the answer holds that many numbers per token read, bounded by ``max_answer_values``."""
        tokenizer = tokenizer or model.tokenizer
        sizes = check_sizes(texts, param, settings.max_inputs, settings.max_chars, query_param)
        timing = Timing(model=model.name, texts=len(texts))
        key = new_key()
        try:
            async with self.admitted(model, timing.started) as due:
                encoded = await tokenize(tokenizer, texts, sum(sizes), cut, max_tokens)
                timing.tokenized, timing.tokens = time.time(), sum(e.tokens for e in encoded)
                if not truncate:
                    refuse_truncated(encoded, param, min(max_tokens or tokenizer.max_length, tokenizer.max_length), query_param)
                if values_per_token is not None:
                    what = f"{timing.tokens} tokens × {values_per_token}"
                    check_answer_size(timing.tokens * values_per_token, what, param, settings.max_answer_values)
                wire = ids_to_wire([e.ids for e in encoded], key, due)
                carried = await model.calls.submit(wire, abandoned=lambda: model.forget(key), within_s=due - time.time())
        except Overloaded as refused:  # it would only time out in the queue (serving/coalesce.py)
            raise APIError(503, "overloaded", f"{refused}: retry shortly", retry_after=1) from None
        if any(forward is None for _, forward in carried):  # left out in the Encoder as overdue, a hair before our own timeout
            raise overdue(due, timing.started)
        timing.encoded, timing.passes = time.time(), [Pass(*forward) for forward in {forward for _, forward in carried}]
        rows = rows_from_wire([row for row, _ in carried])
        refuse_non_finite(model, rows, param, query_param)
        return encoded, rows, timing

    async def embed(
        self,
        model: ServedModel,
        texts: list[str],
        param: str,
        *,
        prompt: str,
        truncate: bool,
        dimensions: int | None,
        cut: str = "right",
        max_tokens: int | None = None,
        query_param: str | None = None,
    ) -> tuple[list[np.ndarray], Timing]:
        """Sentence embeddings of ``texts`` with ``prompt`` before each, cut to ``dimensions`` (with ``query_param``,
        the first text is a query beside the list: ``run``)."""
        check_dimensions(model.spec, dimensions)
        texts = [prompt + text for text in texts]
        _, vectors, timing = await self.run(model, texts, truncate, param, cut, max_tokens, query_param=query_param)
        return [truncate_dimensions(vector, dimensions, model.spec.normalize) for vector in vectors], timing

    async def relevance(
        self,
        model: ServedModel,
        query: str,
        documents: list[str],
        param: str,
        *,
        truncate: bool = True,
        raw: bool = False,
        cut: str = "right",
    ) -> tuple[list[float], Timing]:
        """Each document's relevance to the query: the cross-encoder's score of the pair (its logit when ``raw``),
        or a multi-vector model's MaxSim of the query's token vectors with the document's (no activation: ``raw`` alike)."""
        if model.spec.task == "multivector":
            texts, tokenizer = [query, *documents], QueryAndDocuments(model.sides)
            encoded, rows, timing = await self.run(model, texts, truncate, param, cut, tokenizer=tokenizer, query_param="query")
            queried, *found = (token_vectors(row, e.ids, model.spec.skiplist if i else ()) for i, (row, e) in enumerate(zip(rows, encoded)))
            return [maxsim(queried, document) for document in found], timing
        _, logits, timing = await self.run(model, [(query, document) for document in documents], truncate, param, cut)
        return [float(row[0] if raw else scores(row, model.spec.activation)[0]) for row in logits], timing

    async def multivectors(
        self, model: ServedModel, texts: list[str], side: Side, param: str, *, prompt: str, truncate: bool, cut: str = "right"
    ) -> tuple[list[np.ndarray], Timing]:
        """A multi-vector model's ``[tokens, dim]`` vectors of each text, read as a query or as a document
        (which leaves out its skiplist's tokens), with ``prompt`` before each."""
        texts = [prompt + text for text in texts]
        tokenizer, dimensions = model.sides[side], model.spec.dimensions
        encoded, rows, timing = await self.run(model, texts, truncate, param, cut, tokenizer=tokenizer, values_per_token=dimensions)
        skiplist = model.spec.skiplist if side == "document" else ()
        return [token_vectors(row, e.ids, skiplist) for row, e in zip(rows, encoded)], timing

    def answer(self, model: ServedModel, data: list[dict], timing: Timing) -> Response:
        """The list answer of the routes, straight to JSON (``api/responses.py``)."""
        return self.timed({"object": "list", "data": data, "model": model.name, "usage": usage(timing.tokens)}, timing)

    def timed(self, payload: Any, timing: Timing) -> Response:
        """``payload`` with the timing headers; the request's metrics and spans recorded."""
        timing.answered = time.time()
        telemetry.request(timing)
        return json_response(payload, headers=timing.headers())

    def classifications(
        self, model: ServedModel, encoded: list[Encoded], logits: list[np.ndarray], top_k: int | None, raw: bool = False
    ) -> list[dict]:
        """One answer per text: its best label and score, and the ``top_k`` best when asked for."""
        data = []
        for index, (row, e) in enumerate(zip(logits, encoded)):
            ranked = ranked_labels(row if raw else scores(row, model.spec.activation), model.spec.labels, top_k or 1)
            top = [{"label": label, "score": score} for label, score in ranked] if top_k else None
            data.append({"index": index, "label": ranked[0][0], "score": ranked[0][1], "scores": top, "truncated": e.truncated})
        return data
