"""The request pipeline every route runs on, whatever its API's shape: check the texts, tokenize
them (off the event loop unless short), send their ids through the model's shared calls to its Encoder, and
answer with the timing headers. ``service.py``'s ``TextBento`` is one (its routes are OpenAI's,
Cohere's/Jina's and textbento's); ``api/tei_routes.py`` runs TEI's routes on the same instance.
"""

from __future__ import annotations

import asyncio
import time
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
from .limits import check_sizes, refuse_truncated
from .options import check_dimensions
from .responses import json_response, usage

# A request of at most this many characters is tokenized on the event loop: 500 characters take
# about 0.18 ms, less than handing them to a thread and back (docs/design.md 8). A longer one goes
# to a thread, so that no request holds the loop for long.
INLINE_CHARS = 500


async def tokenize(tokenizer: Any, texts: list[TextInput], chars: int, cut: str, max_tokens: int | None) -> list[Encoded]:
    """``texts`` tokenized on the event loop when they hold at most ``INLINE_CHARS`` characters in all, else on a thread."""
    if chars <= INLINE_CHARS:
        return tokenizer.encode(texts, cut, max_tokens)
    return await asyncio.to_thread(tokenizer.encode, texts, cut, max_tokens)


class Pipeline:
    """What a route needs: the served models, and the steps from texts to an answer."""

    models: Catalog

    async def run(
        self,
        model: ServedModel,
        texts: list[TextInput],
        truncate: bool,
        param: str,
        cut: str = "right",
        max_tokens: int | None = None,
        tokenizer: Any = None,
    ) -> tuple[list[Encoded], list[np.ndarray], Timing]:
        """Check, tokenize (off the event loop unless short: ``INLINE_CHARS``; in at most ``max_tokens``
        a text, the model's limit without it; with ``tokenizer`` where not the model's own: a
        multi-vector model's query or document side), then encode; the texts share calls to the
        model's Encoder with other requests' texts. Timed for the answer's headers."""
        tokenizer = tokenizer or model.tokenizer
        sizes = check_sizes(texts, param, settings.max_inputs, settings.max_chars)
        timing = Timing(model=model.name, texts=len(texts))
        # The request's deadline (serving/gone.py) travels with its texts; work past it is not started.
        due, key = deadline.get() or timing.started + settings.timeout_s, new_key()
        overdue = APIError(504, "timeout", f"not answered within its deadline ({due - timing.started:.3g} s)", retry_after=1)
        if due <= timing.started:
            raise overdue
        try:
            with model.admitted():
                async with asyncio.timeout(due - time.time()):
                    encoded = await tokenize(tokenizer, texts, sum(sizes), cut, max_tokens)
                    timing.tokenized, timing.tokens = time.time(), sum(e.tokens for e in encoded)
                    if not truncate:
                        refuse_truncated(encoded, param, min(max_tokens or tokenizer.max_length, tokenizer.max_length))
                    wire = ids_to_wire([e.ids for e in encoded], key, due)
                    carried = await model.calls.submit(wire, abandoned=lambda: model.forget(key), within_s=due - time.time())
        except TimeoutError:
            raise overdue from None
        except Overloaded as refused:  # it would only time out in the queue (serving/coalesce.py)
            raise APIError(503, "overloaded", f"{refused}: retry shortly", retry_after=1) from None
        if any(forward is None for _, forward in carried):  # left out in the Encoder as overdue, a hair before our own timeout
            raise overdue
        timing.encoded, timing.passes = time.time(), [Pass(*forward) for forward in {forward for _, forward in carried}]
        return encoded, rows_from_wire([row for row, _ in carried]), timing

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
    ) -> tuple[list[np.ndarray], Timing]:
        """Sentence embeddings of ``texts`` with ``prompt`` before each, cut to ``dimensions``."""
        check_dimensions(model.spec, dimensions)
        _, vectors, timing = await self.run(model, [prompt + text for text in texts], truncate, param, cut, max_tokens)
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
            tokenizer = QueryAndDocuments(model.sides)
            encoded, rows, timing = await self.run(model, [query, *documents], truncate, param, cut, tokenizer=tokenizer)
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
        encoded, rows, timing = await self.run(model, texts, truncate, param, cut, tokenizer=model.sides[side])
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
