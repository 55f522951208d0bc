"""Cohere's v2 embed route (its types: ``api/cohere.py``), for Cohere's own client, over the request
pipeline of the service instance answering (``api/pipeline.py``), as TEI's routes are; errors come in
Cohere's shape on its paths (``api/errors.py``)."""

from __future__ import annotations

import uuid

import numpy as np
from fastapi import APIRouter
from starlette.responses import Response

from models.spec import ModelSpec

from . import cohere
from .compact import by_type, refuse_unservable
from .errors import COHERE_ERROR_RESPONSES, APIError
from .options import prompt_for
from .pipeline import Pipeline
from .tei_routes import ThisPipeline

router = APIRouter()


@router.post("/v2/embed", response_model=cohere.EmbedResponse, responses=COHERE_ERROR_RESPONSES)
async def embed(request: cohere.EmbedRequest, server: Pipeline = ThisPipeline) -> Response:
    model = server.models.pick(request.model, "embed")
    refuse_unservable(model, request.embedding_types, request.output_dimension, "embedding_types", "output_dimension")
    if request.max_tokens is not None and request.max_tokens <= model.tokenizer.special_tokens:
        reason = f"leaves no room for text beside the model's {model.tokenizer.special_tokens} special tokens"
        raise APIError(400, "invalid_request", f"max_tokens {request.max_tokens} {reason}", "max_tokens")
    vectors, timing = await server.embed(
        model,
        request.texts,
        "texts",
        prompt=role_prompt(model.spec, request.input_type),
        truncate=request.truncate != "NONE",
        dimensions=request.output_dimension,
        cut="left" if request.truncate == "START" else "right",
        max_tokens=request.max_tokens,
    )
    rows = np.stack(vectors)
    embeddings = {kind: by_type(rows, kind, model.ranges) for kind in dict.fromkeys(request.embedding_types)}
    meta = {"api_version": {"version": "2"}, "billed_units": {"input_tokens": timing.tokens}}
    answer = {
        "id": str(uuid.uuid4()),
        "embeddings": embeddings,
        "texts": request.texts,
        "meta": meta,
        "response_type": "embeddings_by_type",
    }
    return server.timed(answer, timing)


def role_prompt(spec: ModelSpec, input_type: str | None) -> str:
    """The model's prompt for the texts' role: the first of ``PROMPT_NAMES`` it has, else its default prompt."""
    name = next((name for name in cohere.PROMPT_NAMES.get(input_type or "", ()) if name in spec.prompts), None)
    return prompt_for(spec, name, None)
