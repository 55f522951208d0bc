"""OpenAI's embeddings and model list, for the ``openai`` client and everything that speaks its API."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from fastapi import APIRouter
from starlette.responses import Response

from models.tasks import task_of

from ..catalog import ServedModel
from ..compact import by_type, refuse_unservable
from ..errors import ERROR_RESPONSES
from ..options import prompt_for
from ..pipeline import Pipeline, ThePipeline
from ..types import EmbeddingsRequest, EmbeddingsResponse, ModelCard, ModelList

router = APIRouter()


@router.post("/v1/embeddings", response_model=EmbeddingsResponse, responses=ERROR_RESPONSES)
async def embeddings(request: EmbeddingsRequest, pipeline: Pipeline = ThePipeline) -> Response:
    model = pipeline.models.pick(request.model, "embed")
    refuse_unservable(model, [request.encoding_format], request.dimensions, "encoding_format", "dimensions")
    prompt = prompt_for(model.spec, request.prompt_name, request.prompt)
    vectors, timing = await pipeline.embed(
        model, request.input, "input", prompt=prompt, truncate=request.truncate, dimensions=request.dimensions
    )
    rows = by_type(np.stack(vectors), request.encoding_format, model.ranges)
    return pipeline.answer(model, [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)], timing)


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
