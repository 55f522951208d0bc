"""text-embeddings-inference's routes (their types: ``api/tei.py``), for TEI's clients: huggingface_hub's
``InferenceClient``, LangChain's and LlamaIndex's TEI integrations. Each is TEI's shape over the
request pipeline (``api/pipeline.py``: ``run``, ``embed``, ``relevance``, ``timed``); errors come in
TEI's shape on these paths (``api/errors.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import bentoml
import numpy as np
from fastapi import APIRouter, Body
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.responses import Response

from models.postprocess import l2_normalize, ranked_labels, scores
from models.tasks import task_of
from serving.settings import settings

from .. import tei
from ..errors import TEI_ERROR_RESPONSES
from ..flow import unhealthy
from ..limits import check_answer_size
from ..options import prompt_for
from ..pipeline import Pipeline, ThePipeline
from ..responses import json_response, sparse_json

router = APIRouter()


@router.post("/embed", response_model=tei.EmbedResponse, responses=TEI_ERROR_RESPONSES)
async def tei_embed(request: tei.EmbedRequest, pipeline: Pipeline = ThePipeline) -> Response:
    model = pipeline.models.pick(request.model, "embed")
    prompt = prompt_for(model.spec, request.prompt_name, None)
    truncate, dimensions = request.truncate is not False, request.dimensions
    vectors, timing = await pipeline.embed(
        model,
        request.inputs,
        "inputs",
        prompt=prompt,
        truncate=truncate,
        dimensions=dimensions,
        truncation_direction=request.truncation_direction,
    )
    return pipeline.timed([l2_normalize(vector) if request.normalize else vector for vector in vectors], timing)


@router.post("/embed_sparse", response_model=tei.EmbedSparseResponse, responses=TEI_ERROR_RESPONSES)
async def embed_sparse(request: tei.EmbedSparseRequest, pipeline: Pipeline = ThePipeline) -> Response:
    """SPLADE's sparse vectors: per text, its non-zero ``{index, value}``."""
    model = pipeline.models.pick(request.model, "sparse")
    texts = [prompt_for(model.spec, request.prompt_name, None) + text for text in request.inputs]
    _, vectors, timing = await pipeline.run(model, texts, request.truncate is not False, "inputs", request.truncation_direction)
    weights = sum(int(np.count_nonzero(vector)) for vector in vectors)  # known only once computed: a weight per vocabulary id at most
    check_answer_size(weights, f"{weights} non-zero weights", "inputs", settings.max_answer_values)
    return pipeline.timed([sparse_json(vector) for vector in vectors], timing)


@router.post("/embed_all", response_model=tei.EmbedAllResponse, responses=TEI_ERROR_RESPONSES)
async def embed_all(request: tei.EmbedAllRequest, pipeline: Pipeline = ThePipeline) -> Response:
    """A multi-vector model's token vectors of each text, read as a query or a document."""
    model = pipeline.models.pick(request.model, "multivector")
    prompt, truncate = prompt_for(model.spec, request.prompt_name, None), request.truncate is not False
    vectors, timing = await pipeline.multivectors(
        model,
        request.inputs,
        request.input_type,
        "inputs",
        prompt=prompt,
        truncate=truncate,
        truncation_direction=request.truncation_direction,
    )
    return pipeline.timed(vectors, timing)


@router.post("/predict", response_model=tei.PredictResponse, responses=TEI_ERROR_RESPONSES)
async def predict(request: tei.PredictRequest, pipeline: Pipeline = ThePipeline) -> Response:
    """Every label with its score, best first, per input (a text or a pair)."""
    model = pipeline.models.pick(request.model, "classify")
    inputs, parameters = request.inputs, request.parameters or tei.ClassificationParameters()
    _, logits, timing = await pipeline.run(model, inputs.items, request.truncate is not False, "inputs", request.truncation_direction)
    raw = request.raw_scores or parameters.function_to_apply == "none"
    activation = parameters.function_to_apply if parameters.function_to_apply in ("sigmoid", "softmax") else model.spec.activation
    top_k = parameters.top_k or len(model.spec.labels)
    answers = [
        [
            {"score": score, "label": label}
            for label, score in ranked_labels(row if raw else scores(row, activation), model.spec.labels, top_k)
        ]
        for row in logits
    ]
    return pipeline.timed(answers if inputs.batch else answers[0], timing)


@router.post("/rerank", response_model=tei.RerankResponse, responses=TEI_ERROR_RESPONSES)
async def tei_rerank(request: tei.RerankRequest, pipeline: Pipeline = ThePipeline) -> Response:
    model = pipeline.models.pick(request.model, "rerank")
    truncate = request.truncate is not False
    relevance, timing = await pipeline.relevance(
        model,
        request.query,
        request.texts,
        "texts",
        truncate=truncate,
        raw=request.raw_scores,
        truncation_direction=request.truncation_direction,
    )
    return pipeline.timed(tei.ranks(relevance, request.texts, request.return_text), timing)


@router.post("/similarity", response_model=tei.SimilarityResponse, responses=TEI_ERROR_RESPONSES)
async def similarity(request: tei.SimilarityRequest, pipeline: Pipeline = ThePipeline) -> Response:
    """The cosine similarity of each sentence to the source sentence."""
    model = pipeline.models.pick(request.model, "embed")
    parameters = request.parameters or tei.SimilarityParameters()
    prompt = prompt_for(model.spec, parameters.prompt_name, None)
    texts = [request.inputs.source_sentence, *request.inputs.sentences]
    truncate = parameters.truncate is not False
    vectors, timing = await pipeline.embed(
        model,
        texts,
        "inputs.sentences",
        prompt=prompt,
        truncate=truncate,
        dimensions=None,
        truncation_direction=parameters.truncation_direction,
        query_param="inputs.source_sentence",
    )
    return pipeline.timed(tei.cosines(vectors[0], vectors[1:]), timing)


@router.post("/tokenize", response_model=tei.TokenizeResponse, responses=TEI_ERROR_RESPONSES)
async def tokenize(request: tei.TokenizeRequest, pipeline: Pipeline = ThePipeline) -> Response:
    """The tokens each input is read as, uncut, with where they lie in it: at most ``max_tokenize_tokens``
    in all (413 naming the input that passes them), admitted and within its deadline as every route."""
    model = pipeline.models.named(request.model)
    texts = [prompt_for(model.spec, request.prompt_name, None) + text for text in request.inputs]
    listed = await pipeline.tokens(model, texts, request.add_special_tokens, "inputs")
    return json_response([[token.__dict__ for token in tokens] for tokens in listed])


@router.post("/decode", response_model=list[str], responses=TEI_ERROR_RESPONSES)
async def decode(request: tei.DecodeRequest, pipeline: Pipeline = ThePipeline) -> Response:
    """Each list of token ids back to text, by the model's tokenizer (special tokens left out unless ``skip_special_tokens`` is false)."""
    model = pipeline.models.named(request.model)
    return json_response(await pipeline.decode(model, request.ids, request.skip_special_tokens, "ids"))


@router.get(
    "/health",
    response_class=Response,
    responses={200: {"description": "every served model's Encoder answers (empty)"}, **TEI_ERROR_RESPONSES},
)
async def health(pipeline: Pipeline = ThePipeline) -> Response:
    """TEI's health check: 200 (empty) while every served model's Encoder answers, else 503 naming those that do not."""
    answering = await asyncio.gather(*(model.answers() for model in pipeline.models))
    if silent := [model.name for model, answers in zip(pipeline.models, answering) if not answers]:
        raise unhealthy(silent)
    return Response(status_code=200)


@router.get("/info", response_model=tei.Info, responses=TEI_ERROR_RESPONSES)
async def info(model: str | None = None, pipeline: Pipeline = ThePipeline) -> tei.Info:
    """The model (the first served unless ``?model=`` names one) and this server's limits, in TEI's fields."""
    served = pipeline.models.named(model)
    device = await served.runtime()
    return tei.Info(
        model_id=served.spec.source or served.name,
        model_sha=served.spec.revision,
        model_dtype=tei.dtype(device["precision"]),
        served_model_name=served.name,
        model_type=tei.model_type(served.spec),
        max_concurrent_requests=settings.max_concurrency,
        max_input_length=served.spec.max_length,
        max_batch_tokens=settings.token_budget,
        max_batch_requests=settings.max_batch_size,
        max_client_batch_size=settings.max_inputs,
        auto_truncate=True,
        tokenization_workers=settings.api_workers,
        version=bentoml.__version__,
    )


# What TEI's root route hands a request to, by the route the model's task names (``Task.tei_root_route``).
ROOT_ROUTES = {
    "embed": (tei.EmbedRequest, tei_embed),
    "embed_sparse": (tei.EmbedSparseRequest, embed_sparse),
    "embed_all": (tei.EmbedAllRequest, embed_all),
    "predict": (tei.PredictRequest, predict),
    "rerank": (tei.RerankRequest, tei_rerank),
    "similarity": (tei.SimilarityRequest, similarity),
}


@router.post("/", responses=TEI_ERROR_RESPONSES)
async def tei_root(body: dict[str, Any] = Body(), model: str | None = None, pipeline: Pipeline = ThePipeline) -> Response:
    """TEI's root route, by what the model (``model``, else the first served) does: ``/predict`` for a
    classifier, ``/rerank`` for a reranker, ``/embed_sparse`` for SPLADE, ``/embed`` for an embedder,
    for a multi-vector model ``/rerank`` given a query, else ``/embed_all``,
    and ``/similarity`` when an embedder gets a source sentence and sentences (as huggingface_hub's
    ``sentence_similarity`` sends them). ``?model=`` names the model for clients that cannot put it in
    the body: ``InferenceClient(model="http://host:3000/?model=classifier")``."""
    if model is not None:
        body = {**body, "model": model}
    named = parse(tei.TEIRequest, {"model": body["model"]}).model if "model" in body else None  # 422 for a model that is no name
    served = pipeline.models.named(named)
    request_type, route = ROOT_ROUTES[task_of(served.spec).tei_root_route(served.spec, body)]
    return await route(parse(request_type, body), pipeline)


def parse(request_type: type[tei.TEIRequest], body: dict[str, Any]) -> Any:
    """``body`` as ``request_type``; invalid → the 422 FastAPI's own validation would give."""
    try:
        return request_type.model_validate(body)
    except ValidationError as exc:
        raise RequestValidationError([{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]) from None
