"""textbento's own routes: classification (and the sentiment shortcut) and multi-vector embeddings."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from ..errors import ERROR_RESPONSES
from ..options import prompt_for
from ..pipeline import Pipeline, ThePipeline
from ..responses import base64_floats
from ..types import ClassifyRequest, ClassifyResponse, MultiVectorRequest, MultiVectorResponse, SentimentRequest, SentimentResponse

router = APIRouter()


@router.post("/v1/classify", response_model=ClassifyResponse, responses=ERROR_RESPONSES)
async def classify(request: ClassifyRequest, pipeline: Pipeline = ThePipeline) -> Response:
    model = pipeline.models.pick(request.model, "classify")
    encoded, logits, timing = await pipeline.run(model, request.inputs, request.truncate, "inputs")
    return pipeline.answer(model, pipeline.classifications(model, encoded, logits, request.top_k, request.raw_scores), timing)


@router.post("/api/v1/sentiment", response_model=SentimentResponse, responses=ERROR_RESPONSES)
async def sentiment(request: SentimentRequest, pipeline: Pipeline = ThePipeline) -> Response:
    model = pipeline.models.pick(request.model, "classify")
    encoded, logits, timing = await pipeline.run(model, [request.text], True, "inputs")
    (answer,) = pipeline.classifications(model, encoded, logits, None)
    return pipeline.timed({"label": answer["label"], "confidence": answer["score"]}, timing)


@router.post("/v1/multivector", response_model=MultiVectorResponse, responses=ERROR_RESPONSES)
async def multivector(request: MultiVectorRequest, pipeline: Pipeline = ThePipeline) -> Response:
    """A multi-vector (ColBERT) model's token vectors of each text, read as a query or a document."""
    model = pipeline.models.pick(request.model, "multivector")
    prompt = prompt_for(model.spec, request.prompt_name, None)
    vectors, timing = await pipeline.multivectors(
        model, request.input, request.input_type, "input", prompt=prompt, truncate=request.truncate
    )
    base64 = request.encoding_format == "base64"  # else the arrays, written as lists (api/responses.py)
    data = [
        {"object": "multivector", "index": i, "shape": rows.shape, "embedding": base64_floats(rows) if base64 else rows}
        for i, rows in enumerate(vectors)
    ]
    return pipeline.answer(model, data, timing)
