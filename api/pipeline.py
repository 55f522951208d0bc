"""The request pipeline every route runs on, whatever its API's shape: check the texts, tokenize
them (off the event loop unless short), send their ids through the model's shared calls to its Encoder, and
answer with the timing headers. Each API worker makes one over the models it serves; the routes
(``api/routes/``) get it as a dependency (``api/routes/__init__.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import numpy as np
from fastapi import Depends, Request
from starlette.responses import Response

from models.inference import Pass
from models.postprocess import matryoshka_prefix, maxsim, ranked_labels, scores, token_vectors
from models.tasks import task_of
from models.tokenization import Encoded, PairsCut, QueryAndDocuments, Side, TextInput, Token, TokenIds, TooManyTokens
from serving.settings import settings
from serving.telemetry import Timing, telemetry
from serving.wire import ids_to_wire, rows_from_wire

from .catalog import Catalog, ServedModel
from .errors import APIError
from .flow import Budget, admitted, sent
from .limits import check_answer_size, check_sizes, input_named, refuse_truncated
from .options import check_dimensions
from .responses import json_response, usage

# A request of at most this many characters is tokenized on the event loop: it takes less than handing
# it to a thread and back (docs/design.md 8). A longer one goes to a thread, so that no request holds
# the loop for long.
INLINE_CHARS = 500
logger = logging.getLogger("textbento")


async def tokenize(tokenizer: Any, texts: list[TextInput], chars: int, truncation_direction: str, max_tokens: int | None) -> list[Encoded]:
    """``texts`` tokenized on the event loop when they hold at most ``INLINE_CHARS`` characters in all, else on a thread."""
    if chars <= INLINE_CHARS:
        return tokenizer.encode(texts, truncation_direction, max_tokens)
    return await asyncio.to_thread(tokenizer.encode, texts, truncation_direction, max_tokens)


# Where token ids not of the model's own vocabulary come from, and what to do instead.
FOREIGN_IDS = (
    "token ids are read in this model's own vocabulary, as /tokenize lists them; ids of another tokenizer (tiktoken's, "
    "as LangChain's OpenAIEmbeddings sends at its defaults) cannot be: send the text instead "
    "(OpenAIEmbeddings(check_embedding_ctx_length=False))"
)


def check_vocabulary(ids: list[int], vocabulary: int, where: str, hint: str = "") -> None:
    """422 naming the largest id of ``ids`` (``where.j``) when it is past the vocabulary's ``vocabulary`` ids, with ``hint`` after."""
    if ids and (largest := max(ids)) >= vocabulary:
        at = f"{where}.{ids.index(largest)}"
        raise APIError(
            422, "invalid_request", f"{at}: token id {largest} is not in the model's vocabulary (ids 0 to {vocabulary - 1}){hint}", at
        )


def own_token_ids(model: ServedModel, inputs: list[str | list[int]], param: str, prompt: str) -> list[str | TokenIds]:
    """The inputs, each list of token ids checked as the model's own and made ``TokenIds``: every id in its
    vocabulary, framed as its tokenizer frames every text (BERT's ``[CLS] … [SEP]``: ids of another
    tokenizer, which can fall inside a vocabulary, almost never are), within its limit, and no prompt to put
    before them (422, or 413 past the limit, naming the input)."""
    tokenizer = model.tokenizer
    vocabulary, (prefix, suffix) = tokenizer.vocabulary_size, tokenizer.framing
    checked: list[str | TokenIds] = []
    for i, one in enumerate(inputs):
        if isinstance(one, str):
            checked.append(one)
            continue
        where = f"{param}.{i}"
        if prompt:
            message = f"token ids are read as they are, with no prompt before them; this request's is {prompt!r} (send text instead)"
            raise APIError(422, "invalid_request", f"{where}: {message}", where)
        check_vocabulary(one, vocabulary, where, f"; {FOREIGN_IDS}")
        if len(one) < len(prefix) + len(suffix) or tuple(one[: len(prefix)]) != prefix or tuple(one[len(one) - len(suffix) :]) != suffix:
            framing = f"begin with {list(prefix)} and end with {list(suffix)}, as the model's tokenizer frames every text"
            raise APIError(422, "invalid_request", f"{where}: token ids must {framing}; {FOREIGN_IDS}", where)
        if len(one) > tokenizer.max_length:
            message = f"{len(one)} token ids; the model reads at most {tokenizer.max_length} and token ids are not cut"
            raise APIError(413, "input_too_long", f"{where}: {message}", where)
        checked.append(TokenIds(one))
    return checked


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

    def __init__(self, models: Catalog) -> None:
        self.models = models

    async def run(
        self,
        model: ServedModel,
        texts: list[TextInput],
        truncate: bool,
        param: str,
        truncation_direction: str = "right",
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
        budget = Budget.start(timing.started)
        async with admitted(model.admission, budget):
            encoded = await tokenize(tokenizer, texts, sum(sizes), truncation_direction, max_tokens)
            timing.tokenized, timing.tokens = time.time(), sum(e.tokens for e in encoded)
            if not truncate:
                refuse_truncated(encoded, param, min(max_tokens or tokenizer.max_length, tokenizer.max_length), query_param)
            if values_per_token is not None:
                what = f"{timing.tokens} tokens × {values_per_token}"
                check_answer_size(timing.tokens * values_per_token, what, param, settings.max_answer_values)
            carried = await sent(model.calls, ids_to_wire([e.ids for e in encoded], budget.key, budget.due), budget, model.forget)
        if any(forward is None for _, forward in carried):  # left out in the Encoder as overdue, a hair before our own timeout
            raise budget.overdue()
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
        truncation_direction: str = "right",
        max_tokens: int | None = None,
        query_param: str | None = None,
    ) -> tuple[list[np.ndarray], Timing]:
        """Sentence embeddings of ``texts`` with ``prompt`` before each, cut to ``dimensions`` (with ``query_param``,
        the first text is a query beside the list: ``run``)."""
        check_dimensions(model.spec, dimensions)
        if any(isinstance(text, list) for text in texts):
            texts = own_token_ids(model, texts, param, prompt)
        texts = [text if isinstance(text, TokenIds) else prompt + text for text in texts]
        _, vectors, timing = await self.run(model, texts, truncate, param, truncation_direction, max_tokens, query_param=query_param)
        return [matryoshka_prefix(vector, dimensions, model.spec.normalize) for vector in vectors], timing

    async def relevance(
        self,
        model: ServedModel,
        query: str,
        documents: list[str],
        param: str,
        *,
        truncate: bool = True,
        raw: bool = False,
        truncation_direction: str = "right",
        document_tokens: int | None = None,
    ) -> tuple[list[float], Timing]:
        """Each document's relevance to the query: the cross-encoder's score of the pair (its logit when ``raw``),
        or a multi-vector model's MaxSim of the query's token vectors with the document's (no activation: ``raw`` alike).
        With ``document_tokens``, each document is read in its first that many tokens (its own, special tokens aside)."""
        if task_of(model.spec).ranks_by_maxsim:
            texts, tokenizer = [query, *documents], QueryAndDocuments(model.sides, document_tokens)
            encoded, rows, timing = await self.run(
                model, texts, truncate, param, truncation_direction, tokenizer=tokenizer, query_param="query"
            )
            queried, *found = (token_vectors(row, e.ids, model.spec.skiplist if i else ()) for i, (row, e) in enumerate(zip(rows, encoded)))
            return [maxsim(queried, document) for document in found], timing
        pairs = [(query, document) for document in documents]
        tokenizer = None if document_tokens is None else PairsCut(model.tokenizer, document_tokens)
        return await self.pair_scores(
            model, pairs, param, truncate=truncate, raw=raw, truncation_direction=truncation_direction, tokenizer=tokenizer
        )

    async def pair_scores(
        self,
        model: ServedModel,
        pairs: list[tuple[str, str]],
        param: str,
        *,
        truncate: bool = True,
        raw: bool = False,
        truncation_direction: str = "right",
        tokenizer: Any = None,
    ) -> tuple[list[float], Timing]:
        """A cross-encoder's score of each pair (its logit when ``raw``), each pair read together."""
        _, logits, timing = await self.run(model, pairs, truncate, param, truncation_direction, tokenizer=tokenizer)
        return [float(row[0] if raw else scores(row, model.spec.activation)[0]) for row in logits], timing

    async def multivectors(
        self,
        model: ServedModel,
        texts: list[str],
        side: Side,
        param: str,
        *,
        prompt: str,
        truncate: bool,
        truncation_direction: str = "right",
    ) -> tuple[list[np.ndarray], Timing]:
        """A multi-vector model's ``[tokens, dim]`` vectors of each text, read as a query or as a document
        (which leaves out its skiplist's tokens), with ``prompt`` before each."""
        texts = [prompt + text for text in texts]
        tokenizer, dimensions = model.sides[side], model.spec.dimensions
        encoded, rows, timing = await self.run(
            model, texts, truncate, param, truncation_direction, tokenizer=tokenizer, values_per_token=dimensions
        )
        skiplist = model.spec.skiplist if side == "document" else ()
        return [token_vectors(row, e.ids, skiplist) for row, e in zip(rows, encoded)], timing

    async def tokens(self, model: ServedModel, texts: list[str], add_special_tokens: bool, param: str) -> list[list[Token]]:
        """The tokens each text is read as, uncut, with where they lie in it (on a thread): at most
        ``max_tokenize_tokens`` in all (413 naming the text that passes them), admitted and within its deadline as every route."""
        check_sizes(texts, param, settings.max_inputs, settings.max_chars)
        async with admitted(model.admission, Budget.start()):
            try:
                return await asyncio.to_thread(model.tokenizer.tokens, texts, add_special_tokens, settings.max_tokenize_tokens)
            except TooManyTokens as over:
                message = f"{over.tokens} tokens by input {over.index}; /tokenize lists at most {over.limit} tokens per request"
                raise APIError(413, "too_many_tokens", message, f"{param}.{over.index}") from None

    async def decode(self, model: ServedModel, ids: list[list[int]], skip_special_tokens: bool, param: str) -> list[str]:
        """Each list of token ids back to text (on a thread): ids outside the model's vocabulary refused
        (422 naming the first), at most ``max_tokenize_tokens`` in all (413), admitted as every route."""
        for i, one in enumerate(ids):
            check_vocabulary(one, model.tokenizer.vocabulary_size, f"{param}.{i}")
        if (count := sum(map(len, ids))) > settings.max_tokenize_tokens:
            message = f"{count} token ids in one request; /decode reads at most {settings.max_tokenize_tokens}"
            raise APIError(413, "too_many_tokens", message, param)
        async with admitted(model.admission, Budget.start()):
            return await asyncio.to_thread(model.tokenizer.decode, ids, skip_special_tokens)

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


async def current_pipeline(request: Request) -> Pipeline:
    """The API worker's pipeline (``TextBento`` keeps it on the app's state as it starts). A coroutine, so
    that FastAPI calls it on the event loop: a plain function would be a trip to a thread and back per request."""
    return request.app.state.pipeline


ThePipeline = Depends(current_pipeline)  # what every route takes its pipeline from
