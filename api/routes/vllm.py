"""vLLM's score API (``POST /score``, ``/v1/score``): a relevance per pair of texts, by what the model does.

A cross-encoder scores each pair read together (as ``/v1/rerank``); a multi-vector model scores by
MaxSim, one ``text_1`` (its query) against each ``text_2``; an embedder by the cosine of the two
texts' vectors, as vLLM scores with an embedding model.
"""

from __future__ import annotations

import time
import uuid

import numpy as np
from fastapi import APIRouter
from starlette.responses import Response

from models.postprocess import l2_normalize
from models.tasks import task_of

from ..catalog import ServedModel
from ..errors import ERROR_RESPONSES, APIError
from ..options import prompt_for
from ..pipeline import Pipeline, ThePipeline
from ..responses import usage
from ..types import ScoreRequest, ScoreResponse

router = APIRouter()


@router.post("/score", response_model=ScoreResponse, responses=ERROR_RESPONSES)
@router.post("/v1/score", response_model=ScoreResponse, responses=ERROR_RESPONSES)
async def score(request: ScoreRequest, pipeline: Pipeline = ThePipeline) -> Response:
    pairs = paired(request.text_1, request.text_2)
    model = scorer(pipeline, request.model)
    firsts = list(dict.fromkeys(first for first, _ in pairs))
    if model.does("rerank") and task_of(model.spec).ranks_by_maxsim:
        if len(firsts) > 1:
            raise APIError(422, "invalid_request", "a multi-vector model scores one text_1 (its query) against each text_2", "text_1")
        scores, timing = await pipeline.relevance(model, firsts[0], [second for _, second in pairs], "text_2")
    elif model.does("rerank"):
        scores, timing = await pipeline.pair_scores(model, pairs, "text_2")
    else:
        texts = list(dict.fromkeys(text for pair in pairs for text in pair))
        vectors, timing = await pipeline.embed(
            model, texts, "text_2", prompt=prompt_for(model.spec, None, None), truncate=True, dimensions=None
        )
        unit = dict(zip(texts, l2_normalize(np.stack(vectors))))
        scores = [float(unit[first] @ unit[second]) for first, second in pairs]
    data = [{"index": i, "object": "score", "score": value} for i, value in enumerate(scores)]
    answer = {"id": f"score-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()), "model": model.name, "data": data}
    return pipeline.timed({**answer, "usage": usage(timing.tokens)}, timing)


def paired(text_1: list[str], text_2: list[str]) -> list[tuple[str, str]]:
    """vLLM's pairs: one ``text_1`` with each ``text_2``, or as many of each, pair by pair (422 otherwise)."""
    if len(text_1) == 1:
        return [(text_1[0], second) for second in text_2]
    if len(text_1) != len(text_2):
        message = f"text_1 has {len(text_1)} texts and text_2 {len(text_2)}: give one text_1, or as many as text_2"
        raise APIError(422, "invalid_request", message, "text_1")
    return list(zip(text_1, text_2))


def scorer(pipeline: Pipeline, name: str | None) -> ServedModel:
    """The model named, else the first that reranks (a cross-encoder or a multi-vector model), else the first embedder."""
    try:
        return pipeline.models.pick(name, "rerank")
    except APIError:
        return pipeline.models.pick(name, "embed")  # its refusal names the model, or what is served
