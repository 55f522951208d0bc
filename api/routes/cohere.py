"""Cohere's v2 embed and rerank and v1 embed (their types: ``api/cohere.py``; errors in Cohere's shape on their
paths: ``api/errors.py``), for Cohere's own clients, and the v1 rerank shape Cohere's and Jina's APIs share."""

from __future__ import annotations

import math
import uuid

import numpy as np
from fastapi import APIRouter
from starlette.responses import Response

from models.postprocess import best_first
from serving.telemetry import Timing

from .. import cohere
from ..compact import by_type, refuse_unservable
from ..errors import COHERE_ERROR_RESPONSES, ERROR_RESPONSES, APIError
from ..options import role_prompt
from ..pipeline import Pipeline, ThePipeline
from ..responses import usage
from ..types import RerankRequest, RerankResponse

router = APIRouter()


@router.post("/v2/embed", response_model=cohere.EmbedResponse, responses=COHERE_ERROR_RESPONSES)
async def embed(request: cohere.EmbedRequest, pipeline: Pipeline = ThePipeline) -> Response:
    embeddings, timing = await embeddings_by_type(request, pipeline)
    return pipeline.timed(embed_answer(request.texts, embeddings, "embeddings_by_type", "2", timing.tokens), timing)


@router.post("/v1/embed", response_model=cohere.EmbedFloatsResponse | cohere.EmbedResponse, responses=COHERE_ERROR_RESPONSES)
async def embed_v1(request: cohere.EmbedV1Request, pipeline: Pipeline = ThePipeline) -> Response:
    """``/v2/embed``'s vectors in v1's shape (``cohere.Client``): without ``embedding_types``, the floats as a bare list."""
    embeddings, timing = await embeddings_by_type(request.as_v2(), pipeline)
    if request.embedding_types is None:
        answer = embed_answer(request.texts, embeddings["float"], "embeddings_floats", "1", timing.tokens)
    else:
        answer = embed_answer(request.texts, embeddings, "embeddings_by_type", "1", timing.tokens)
    return pipeline.timed(answer, timing)


async def embeddings_by_type(request: cohere.EmbedRequest, pipeline: Pipeline) -> tuple[dict, Timing]:
    """The texts' embeddings, one list per type asked for, and the request's timing."""
    model = pipeline.models.pick(request.model, "embed")
    refuse_unservable(model, request.embedding_types, request.output_dimension, "embedding_types", "output_dimension")
    if request.max_tokens is not None and request.max_tokens <= model.tokenizer.special_tokens:
        reason = f"leaves no room for text beside the model's {model.tokenizer.special_tokens} special tokens"
        raise APIError(400, "invalid_request", f"max_tokens {request.max_tokens} {reason}", "max_tokens")
    vectors, timing = await pipeline.embed(
        model,
        request.texts,
        "texts",
        prompt=role_prompt(model.spec, request.input_type),
        truncate=request.truncate != "NONE",
        dimensions=request.output_dimension,
        truncation_direction="left" if request.truncate == "START" else "right",
        max_tokens=request.max_tokens,
    )
    rows = np.stack(vectors)
    return {kind: by_type(rows, kind, model.ranges) for kind in dict.fromkeys(request.embedding_types)}, timing


def embed_answer(texts: list[str], embeddings, response_type: str, version: str, tokens: int) -> dict:
    meta = {"api_version": {"version": version}, "billed_units": {"input_tokens": tokens}}
    return {"id": str(uuid.uuid4()), "embeddings": embeddings, "texts": texts, "meta": meta, "response_type": response_type}


@router.post("/v1/rerank", response_model=RerankResponse, responses=ERROR_RESPONSES)
async def rerank(request: RerankRequest, pipeline: Pipeline = ThePipeline) -> Response:
    """The documents by relevance to the query, best first: each pair scored by the cross-encoder, or
    the query's MaxSim with each document by a multi-vector model."""
    model = pipeline.models.pick(request.model, "rerank")
    relevance, timing = await pipeline.relevance(model, request.query, request.documents, "documents")
    results = [
        {
            "index": i,
            "relevance_score": relevance[i],
            **({"document": {"text": request.documents[i]}} if request.return_documents else {}),
        }
        for i in best_first(relevance)[: request.top_n]
    ]
    return pipeline.timed({"model": model.name, "results": results, "usage": usage(timing.tokens)}, timing)


@router.post("/v2/rerank", response_model=cohere.RerankResponse, responses=COHERE_ERROR_RESPONSES)
async def rerank_v2(request: cohere.RerankRequest, pipeline: Pipeline = ThePipeline) -> Response:
    """``/v1/rerank``'s scores in Cohere v2's shape; each document read in at most ``max_tokens_per_doc`` of its tokens."""
    model = pipeline.models.pick(request.model, "rerank")
    if request.relevant_spans is not None and request.relevant_spans.mode == "enabled":
        message = "relevant spans are not computed here: each document is scored whole (leave relevant_spans out, or mode 'disabled')"
        raise APIError(422, "invalid_request", message, "relevant_spans")
    relevance, timing = await pipeline.relevance(
        model, request.query, request.documents, "documents", document_tokens=request.max_tokens_per_doc
    )
    results = [{"index": i, "relevance_score": relevance[i]} for i in best_first(relevance)[: request.top_n]]
    # Cohere bills a search unit per query with up to 100 documents.
    meta = {"api_version": {"version": "2"}, "billed_units": {"search_units": math.ceil(len(request.documents) / 100)}}
    return pipeline.timed({"id": str(uuid.uuid4()), "results": results, "meta": meta}, timing)
