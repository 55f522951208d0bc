"""text-embeddings-inference's HTTP API, shape for shape (TEI's ``router/src/http/types.rs``): the
request bodies of ``/embed``, ``/embed_sparse``, ``/predict``, ``/rerank``, ``/similarity``,
``/tokenize`` and ``/info``, and the answers built from textbento's results; ``/embed_all`` for
multi-vector (ColBERT) models only, its token vectors read as a query or a document (``input_type``).

Differences, each on purpose: unknown fields are still refused (422 naming them), except the HF
Inference API's ``parameters`` that huggingface_hub's ``InferenceClient`` sends, which are read;
every body may name its ``model`` (TEI serves one model per server); token-id inputs are not
accepted; ``normalize: false`` returns the model's own output, which is unit length when the
model ends with a Normalize module. ``truncate`` defaults to true, as TEI's ``--auto-truncate`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, Field, PlainValidator, RootModel

from models.postprocess import best_first, l2_normalize
from models.spec import ModelSpec
from models.tasks import task_of
from models.tokenization import TextInput
from serving.settings import settings

from .limits import check_count
from .types import (
    InputType,
    Request,
    Text,
    TextList,
    Texts,
    TextsOrIds,
    TokenIdList,
    Unicode,
    as_list,
    counted,
    one_or_many,
    refuse_undecodable,
)


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


# TEI's TruncationDirection: "Right" or "Left", either case.
Direction = Annotated[Literal["right", "left"], BeforeValidator(_lower)]
Truncate = Annotated[bool | None, Field(description="cut texts longer than the model's limit (default: true; false → 413)")]


@dataclass(frozen=True)
class PredictInputs:
    """``/predict``'s inputs: texts and pairs, and whether they came as a batch (answered as a list of lists)."""

    items: list[TextInput]
    batch: bool


def _sequence(value: object) -> TextInput:
    if isinstance(value, list) and len(value) in (1, 2) and all(isinstance(text, str) and text for text in value):
        texts = [refuse_undecodable(text) for text in value]
        return texts[0] if len(texts) == 1 else (texts[0], texts[1])
    raise ValueError("each item of a batch must be [text] or a pair [text, text] of non-empty strings")


def _predict_inputs(value: object) -> PredictInputs:
    """TEI's rule: a string, or a pair [text, text] alone, or a batch [[text] or [text, text], ...]; a
    batch is counted (413 past ``max_inputs``) before any of its items is read."""
    if isinstance(value, str) and value:
        return PredictInputs([refuse_undecodable(value)], batch=False)
    if isinstance(value, list) and value and isinstance(value[0], list):
        check_count(len(value), "inputs", settings.max_inputs)
    if isinstance(value, list) and value and all(isinstance(text, str) for text in value):
        return PredictInputs([_sequence(value)], batch=False)
    if isinstance(value, list) and value and all(isinstance(item, list) for item in value):
        return PredictInputs([_sequence(item) for item in value], batch=True)
    raise ValueError("expected a non-empty string, a pair [text, text], or a batch [[text], [text, text], ...]")


PredictInput = Annotated[PredictInputs, PlainValidator(_predict_inputs, json_schema_input_type=Text | list[Text] | list[list[Text]])]


class TEIRequest(Request):
    model: Unicode | None = Field(None, description="which served model answers (a textbento extension: TEI serves one)")


class EmbedRequest(TEIRequest):
    """``POST /embed``: texts, or token ids in the model's own vocabulary (TEI's ``inputs`` takes both)."""

    inputs: TextsOrIds
    truncate: Truncate = None
    truncation_direction: Direction = "right"
    prompt_name: Unicode | None = Field(None, description="one of the model's sentence-transformers prompts, put before every input")
    normalize: bool = Field(True, description="unit-length vectors (false: the model's own output)")
    dimensions: Annotated[int, Field(ge=1)] | None = Field(None, description="the first ones, unit length again (Matryoshka models)")


class EmbedSparseRequest(TEIRequest):
    """``POST /embed_sparse``: SPLADE models."""

    inputs: Texts
    truncate: Truncate = None
    truncation_direction: Direction = "right"
    prompt_name: Unicode | None = Field(None, description="one of the model's sentence-transformers prompts, put before every input")


class EmbedAllRequest(TEIRequest):
    """``POST /embed_all``: a multi-vector model's token vectors, read as a query or a document."""

    inputs: Texts
    truncate: Truncate = None
    truncation_direction: Direction = "right"
    prompt_name: Unicode | None = Field(None, description="one of the model's prompts, put before every input")
    input_type: InputType = Field(
        "document", description="query or document: which of the model's prefixes and lengths (a textbento extension)"
    )


class EmbedAllResponse(RootModel[list[list[list[float]]]]):
    """Per input text, in request order, its token vectors."""


class SparseValue(BaseModel):
    """One non-zero weight of a sparse vector: its vocabulary id and value."""

    index: int
    value: float


class EmbedSparseResponse(RootModel[list[list[SparseValue]]]):
    """Per input text, in request order, its non-zero weights by ascending ``index``."""


class ClassificationParameters(Request):
    """The HF Inference API's text-classification parameters, as ``InferenceClient.text_classification`` sends them."""

    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = None
    top_k: Annotated[int, Field(ge=1)] | None = None


class PredictRequest(TEIRequest):
    """``POST /predict``: every label with its score, best first, per input."""

    inputs: PredictInput
    truncate: Truncate = None
    truncation_direction: Direction = "right"
    raw_scores: bool = Field(False, description="logits instead of the model's scores")
    parameters: ClassificationParameters | None = None


class RerankRequest(TEIRequest):
    """``POST /rerank``: each text scored against the query by a cross-encoder, best first."""

    query: Text
    texts: TextList
    truncate: Truncate = None
    truncation_direction: Direction = "right"
    raw_scores: bool = Field(False, description="logits instead of sigmoid scores")
    return_text: bool = Field(False, description="echo each text in its result")


class SimilarityInput(Request):
    source_sentence: Text
    sentences: Annotated[list[Text], counted("inputs.sentences"), Field(min_length=1)]


class SimilarityParameters(Request):
    truncate: Truncate = None
    truncation_direction: Direction = "right"
    prompt_name: Unicode | None = None


class SimilarityRequest(TEIRequest):
    """``POST /similarity``: the cosine similarity of each sentence to the source sentence."""

    inputs: SimilarityInput
    parameters: SimilarityParameters | None = None


class TokenizeRequest(TEIRequest):
    """``POST /tokenize``: the tokens the model reads, uncut."""

    inputs: Annotated[list[Unicode], BeforeValidator(as_list, json_schema_input_type=str | list[str]), counted(), Field(min_length=1)]
    add_special_tokens: bool = True
    prompt_name: Unicode | None = None


class DecodeRequest(TEIRequest):
    """``POST /decode``: token ids back to text."""

    # Wrapped before counted (validators before the type run last-declared first): one long list is one input.
    ids: Annotated[list[TokenIdList], counted(), BeforeValidator(one_or_many, json_schema_input_type=TokenIdList | list[TokenIdList])]
    skip_special_tokens: bool = True


class Prediction(BaseModel):
    score: float
    label: str


class PredictResponse(RootModel[list[Prediction] | list[list[Prediction]]]):
    """Per input, every label with its score, best first; a batch's inputs as a list of such lists."""


class Rank(BaseModel):
    index: int
    text: str | None = None
    score: float


class RerankResponse(RootModel[list[Rank]]):
    """The texts by relevance, best first."""


class EmbedResponse(RootModel[list[list[float]]]):
    """One vector per input, in request order."""


class SimilarityResponse(RootModel[list[float]]):
    """One cosine similarity per sentence, in request order."""


class SimpleToken(BaseModel):
    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


class TokenizeResponse(RootModel[list[list[SimpleToken]]]):
    """Per input, its tokens; ``start``/``stop`` are UTF-8 byte offsets into the input."""


class Info(BaseModel):
    """``GET /info``: the model and the server's limits, in TEI's fields."""

    model_id: str
    model_sha: str | None
    model_dtype: str
    served_model_name: str
    model_type: dict[str, dict]
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: int | None
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int
    version: str
    sha: str | None = None
    docker_label: str | None = None


def model_type(spec: ModelSpec) -> dict[str, dict]:
    """TEI's ``model_type``: an embedding model's pooling (none for a multi-vector model's token vectors),
    or a classifier's (a reranker's, with one label) labels."""
    return task_of(spec).tei_model_type(spec)


def dtype(precision: str) -> str:
    """TEI's ``model_dtype`` word for the precision a backend reports (``"int8 (u8×s8)"``, ``"fp16"``, ...)."""
    return {"fp16": "float16", "fp32": "float32"}.get(precision, precision.split()[0])


def ranks(relevance: list[float], texts: list[str], return_text: bool) -> list[dict]:
    """Every text's index and score, best first; its text too when asked for."""
    return [{"index": i, **({"text": texts[i]} if return_text else {}), "score": relevance[i]} for i in best_first(relevance)]


def cosines(source: np.ndarray, others: list[np.ndarray]) -> list[float]:
    """The cosine similarity of each of ``others`` to ``source``."""
    unit = l2_normalize(np.stack([source, *others]))
    return (unit[1:] @ unit[0]).tolist()
