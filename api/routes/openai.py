"""OpenAI's embeddings and model list, for the ``openai`` client and everything that speaks its API."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from fastapi import APIRouter
from starlette.responses import Response

from models.postprocess import l2_normalize
from models.tasks import task_of

from ..catalog import ServedModel
from ..compact import by_type, refuse_unservable
from ..errors import ERROR_RESPONSES, APIError
from ..options import request_prompt
from ..pipeline import Pipeline, ThePipeline
from ..types import EmbeddingsRequest, EmbeddingsResponse, ModelCard, ModelList

router = APIRouter()


@router.post("/v1/embeddings", response_model=EmbeddingsResponse, responses=ERROR_RESPONSES)
async def embeddings(request: EmbeddingsRequest, pipeline: Pipeline = ThePipeline) -> Response:
    """OpenAI's fields, and NVIDIA NIM's and Jina's where they map onto them (``docs/api.md``)."""
    model = pipeline.models.pick(request.model, "embed")
    encoding = encoding_of(request)
    refuse_unservable(
        model, [encoding], request.dimensions, "embedding_type" if request.embedding_type else "encoding_format", "dimensions"
    )
    if request.late_chunking:
        raise APIError(422, "invalid_request", "late chunking is not done here: each input is embedded on its own", "late_chunking")
    asked = {"prompt": request.prompt, "prompt_name": request.prompt_name, "input_type": request.input_type, "task": request.task}
    vectors, timing = await pipeline.embed(
        model,
        request.input,
        "input",
        prompt=request_prompt(model.spec, **asked),
        truncate=request.truncate not in (False, "NONE"),
        dimensions=request.dimensions,
        truncation_direction="left" if request.truncate == "START" else "right",
    )
    if request.normalized:
        vectors = [l2_normalize(vector) for vector in vectors]
    rows = by_type(np.stack(vectors), encoding, model.ranges)
    return pipeline.answer(model, [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)], timing)


def encoding_of(request: EmbeddingsRequest) -> str:
    """``encoding_format``, or Jina's ``embedding_type`` (400 when both are sent and differ)."""
    if request.embedding_type is None:
        return request.encoding_format
    if "encoding_format" in request.model_fields_set and request.encoding_format != request.embedding_type:
        message = f"encoding_format {request.encoding_format!r} and embedding_type {request.embedding_type!r} differ: send one"
        raise APIError(400, "invalid_request", message, "embedding_type")
    return request.embedding_type


@router.get("/v1/models", response_model=ModelList, responses=ERROR_RESPONSES)
async def model_list(pipeline: Pipeline = ThePipeline) -> ModelList:
    runtimes = await asyncio.gather(*(model.runtime() for model in pipeline.models))
    return ModelList(data=[card(model, runtime) for model, runtime in zip(pipeline.models, runtimes)])


def card(model: ServedModel, runtime: dict[str, Any]) -> ModelCard:
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
        pooling=task_of(spec).sentence_pooling(spec),
        prompts=spec.prompts,
        default_prompt_name=spec.default_prompt_name,
        source=spec.source,
        **runtime,
    )
