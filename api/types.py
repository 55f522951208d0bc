"""Request and response bodies of the public HTTP API (pydantic v2).

Unknown fields are rejected (422 naming the field): a typo such as ``input`` for ``inputs``
must not silently fall back to defaults. The embeddings types follow OpenAI's shapes so the
official ``openai`` client works unchanged.

Every string of a request body is a ``Unicode`` (or ``Text``, not empty): a string that is not valid
Unicode is refused with 422 naming its field. JSON can carry one (``"\\ud800"``, half of a surrogate
pair) and Python's parser keeps it, but the tokenizer cannot read it. Every list of texts is
refused for its length alone (413, ``api/limits.check_count``) before any of its items is validated,
so that a body of millions of tiny texts costs one ``len``, not millions of validations.
"""

from __future__ import annotations

from typing import Annotated, Literal

from annotated_types import MaxLen
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, StrictInt, StringConstraints, ValidationInfo
from pydantic_core import PydanticCustomError

from serving.settings import settings

from .limits import check_count


def refuse_undecodable(value: object) -> object:
    """``value`` unchanged, unless it is a string that is not valid Unicode (a lone surrogate): then a
    validation error that says where. Other values pass on to the field's own checks."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError as error:
            where = {"code": f"U+{ord(value[error.start]):04X}", "at": error.start}
            raise PydanticCustomError(
                "string_unicode", "not valid Unicode: a lone surrogate ({code}) at character {at}, which no tokenizer reads", where
            ) from None
    return value


# The one check of every string field: ``tests/test_schemas.py`` holds every request model to it.
DECODABLE = BeforeValidator(refuse_undecodable)
Unicode = Annotated[str, DECODABLE]
Text = Annotated[str, StringConstraints(min_length=1), DECODABLE]


def counted(param: str | None = None) -> BeforeValidator:
    """A list field's check of its length alone, before its items (413 past ``max_inputs``); the error
    names ``param``, the field's own name without it (a nested field gives its whole path)."""

    def check(value: object, info: ValidationInfo) -> object:
        if isinstance(value, list):
            check_count(len(value), param or info.field_name, settings.max_inputs)
        return value

    return BeforeValidator(check)


def as_list(value: object) -> object:
    return [value] if isinstance(value, str) else value


# A list of texts, at most ``max_inputs``, not empty.
TextList = Annotated[list[Text], counted(), Field(min_length=1)]
# One text or a non-empty list of texts, always a list once validated; errors name the item.
Texts = Annotated[list[Text], BeforeValidator(as_list, json_schema_input_type=str | list[str]), counted(), Field(min_length=1)]
# One input's token ids in the model's own vocabulary (the request's whole bound: ``max_tokenize_tokens``).
TokenIdList = Annotated[list[Annotated[StrictInt, Field(ge=0)]], MaxLen(settings.max_tokenize_tokens)]


def one_or_many(value: object) -> object:
    """A text or one list of token ids: a list of one input."""
    if isinstance(value, str) or (isinstance(value, list) and value and all(isinstance(item, int) for item in value)):
        return [value]
    return value


def _text_or_ids(value: object) -> str | list[int]:
    """One input: a text (as ``Text`` checks it), or a list of token ids (integers ≥ 0, at most
    ``max_tokenize_tokens``); an error names the input, and the id at fault."""
    if isinstance(value, str) and value:
        return refuse_undecodable(value)
    if isinstance(value, list):
        if len(value) > settings.max_tokenize_tokens:
            raise PydanticCustomError(
                "too_long", "{count} token ids; at most {limit}", {"count": len(value), "limit": settings.max_tokenize_tokens}
            )
        wrong = next((j for j, id_ in enumerate(value) if type(id_) is not int or id_ < 0), None)
        if wrong is not None:
            raise PydanticCustomError(
                "token_id", "token id {at} is {value}: token ids are integers ≥ 0", {"at": wrong, "value": repr(value[wrong])}
            )
        return value
    raise PydanticCustomError("text_or_ids", "an input is a non-empty text or a list of token ids")


TextOrIds = Annotated[str | list[int], PlainValidator(_text_or_ids, json_schema_input_type=Text | TokenIdList)]
# As ``Texts``, or token ids: one list of them, or a list of inputs each a text or a list of ids (OpenAI's and TEI's inputs).
TextsOrIds = Annotated[
    list[TextOrIds],
    counted(),
    BeforeValidator(one_or_many, json_schema_input_type=str | list[str] | TokenIdList | list[str | TokenIdList]),
    Field(min_length=1),
]


def _text_or_pair(value: object) -> str | tuple[str, str]:
    """One classifier input, checked as a whole so that an error names the item, not a union branch."""
    if isinstance(value, str) and value:
        return refuse_undecodable(value)
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(text, str) and text for text in value):
        return (refuse_undecodable(value[0]), refuse_undecodable(value[1]))
    raise ValueError("expected a non-empty string or a pair [text, text] of non-empty strings")


# For classifiers: texts, or pairs [query, passage] that a cross-encoder reads together.
TextOrPair = Annotated[str | tuple[str, str], PlainValidator(_text_or_pair, json_schema_input_type=Text | tuple[Text, Text])]
Inputs = Annotated[
    list[TextOrPair],
    BeforeValidator(as_list, json_schema_input_type=str | list[str | tuple[str, str]]),
    counted(),
    Field(min_length=1),
]


# A vector's type in an answer (``api/compact.py``): Cohere's ``embedding_types``, OpenAI's ``encoding_format``.
EmbeddingType = Literal["float", "base64", "int8", "uint8", "binary", "ubinary"]


class Request(BaseModel):
    """Base of every request body: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


class Usage(BaseModel):
    """Tokens processed for the request (after truncation, special tokens included)."""

    prompt_tokens: int
    total_tokens: int


class ClassifyRequest(Request):
    """``POST /v1/classify``: one text, or a list of texts and ``[text, text]`` pairs."""

    inputs: Inputs
    model: Unicode | None = None
    top_k: Annotated[int, Field(ge=1)] | None = Field(None, description="also return the k most probable labels with their scores")
    truncate: bool = Field(True, description="cut texts longer than the model's limit (else 413)")
    raw_scores: bool = Field(False, description="logits instead of the model's scores (softmax, or sigmoid per label)")


class LabelScore(BaseModel):
    label: str
    score: float


class Classification(BaseModel):
    """The answer for one input text, at the same ``index`` as in the request."""

    index: int
    label: str
    score: float
    scores: list[LabelScore] | None = None
    truncated: bool


class ClassifyResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Classification]
    model: str
    usage: Usage


class EmbeddingsRequest(Request):
    """``POST /v1/embeddings`` in OpenAI's shape: texts, or token ids in the model's own vocabulary."""

    input: TextsOrIds
    model: Unicode | None = None
    encoding_format: EmbeddingType = Field(
        "float", description="float; base64 of little-endian float32; int8 or uint8 on the model's ranges; binary or ubinary: packed signs"
    )
    dimensions: Annotated[int, Field(ge=1)] | None = Field(
        None, description="fewer than the model's: the first ones, unit length again (Matryoshka models)"
    )
    user: Unicode | None = None
    truncate: bool | Literal["NONE", "START", "END"] = Field(
        True, description="cut texts longer than the model's limit (else 413); NVIDIA NIM's NONE (413), START (cut its start), END"
    )
    prompt_name: Unicode | None = Field(None, description="one of the model's sentence-transformers prompts, put before every input")
    prompt: Unicode | None = Field(None, description="a text put before every input (instead of the model's default prompt)")
    input_type: Literal["query", "passage", "search_query", "search_document", "classification", "clustering"] | None = Field(
        None, description="NVIDIA NIM's (query, passage) and Cohere's roles: the model's prompt for the role, else its default"
    )
    task: Unicode | None = Field(None, description="Jina's: the name of one of the model's prompts (jina-embeddings-v3 names them by task)")
    embedding_type: EmbeddingType | None = Field(None, description="Jina's name for encoding_format")
    normalized: bool | None = Field(None, description="Jina's: unit-length vectors when true; the model's own output otherwise")
    late_chunking: bool = Field(False, description="Jina's: refused when true (each input is embedded on its own)")


class Embedding(BaseModel):
    """One vector in the request's ``encoding_format``: floats, integers, or a base64 string of little-endian float32."""

    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | list[int] | str


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


class Fidelity(BaseModel):
    """The served fast graph against fp32 on this machine, measured at start-up (``models.selfcheck``)."""

    min_cosine: float
    mean_cosine: float
    probe_texts: int
    seconds: float
    max_flipped_mass: float | None = None  # sparse models: the most of a text's L1 mass in weights zero on one graph only
    max_maxsim_error: float | None = None  # multi-vector models: the most a probe MaxSim score moved, per query token
    passed: bool
    gates: dict[str, float]


class Trial(BaseModel):
    """A compute ``auto`` weighed for the model on this machine at start-up (``models.selfcheck``)."""

    backend: str
    precision: str
    fidelity: Fidelity | None  # None: the fp32 graph, the reference
    texts_per_s: float | None  # over the probe, batched and alone; None: missed the gates, not timed
    served: bool


class ModelCard(BaseModel):
    """The served model, in OpenAI's model-list shape plus what a client needs to use it."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "textbento"
    tag: str
    task: Literal["classify", "embed", "sparse", "multivector"]
    labels: list[str]
    max_length: int  # tokens per text served: longer texts are cut, or refused without truncate
    model_max_length: int  # what the model itself reads (its position table); max_length is lower where the import capped it
    dimensions: int | None
    pooling: str | None
    prompts: dict[str, str]
    default_prompt_name: str | None
    backend: str
    device: str
    precision: str
    fidelity: Fidelity | None  # where ``auto`` checked its fast graph; a failed check serves fp32
    trials: list[Trial] = []  # what ``auto`` weighed here, and which it chose (empty for a named backend)
    cpu: str
    source: str


# How a multi-vector model reads a text: as a query (its prefix, expanded to the query length) or a
# document (its prefix, its skiplist's tokens left out); Cohere's names for them are taken too.
COHERE_INPUT_TYPES = {"search_query": "query", "search_document": "document"}
InputType = Annotated[
    Literal["query", "document"],
    BeforeValidator(lambda value: COHERE_INPUT_TYPES.get(value, value) if isinstance(value, str) else value),
]


class MultiVectorRequest(Request):
    """``POST /v1/multivector``: a multi-vector (ColBERT) model's token vectors."""

    input: Texts
    model: Unicode | None = None
    input_type: InputType = Field("document", description="query or document (search_query, search_document)")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="float; base64 of the little-endian float32 [tokens, dim] rows"
    )
    truncate: bool = Field(True, description="cut texts longer than the side's length (else 413)")
    prompt_name: Unicode | None = Field(None, description="one of the model's prompts, put before every input")


class MultiVector(BaseModel):
    """One text's token vectors: ``[tokens, dim]`` floats, or a base64 string of them row after row (little-endian float32)."""

    object: Literal["multivector"] = "multivector"
    index: int
    shape: tuple[int, int]
    embedding: list[list[float]] | str


class MultiVectorResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[MultiVector]
    model: str
    usage: Usage


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class RerankRequest(Request):
    """``POST /v1/rerank``, in the shape Cohere's and Jina's clients send."""

    model: Unicode | None = None
    query: Text
    documents: TextList
    top_n: Annotated[int, Field(ge=1)] | None = Field(None, description="return only the n most relevant documents")
    return_documents: bool = Field(False, description="echo each document's text in its result")


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    """One document: its position in the request and its relevance to the query."""

    index: int
    relevance_score: float
    document: RerankDocument | None = None


class RerankResponse(BaseModel):
    model: str
    results: list[RerankResult]
    usage: Usage


class SentimentRequest(Request):
    """``POST /api/v1/sentiment``: the seed article's route, kept for its clients."""

    text: Text
    model: Unicode | None = None


class SentimentResponse(BaseModel):
    label: str
    confidence: float


class ScoreRequest(Request):
    """``POST /score`` (and ``/v1/score``) in vLLM's shape: ``text_1`` against each of ``text_2``, or pair by pair."""

    model: Unicode | None = None
    text_1: Texts
    text_2: Texts
    truncate_prompt_tokens: None = Field(None, description="vLLM's; refused when set: pairs are cut to the model's limit")


class Score(BaseModel):
    index: int
    object: Literal["score"] = "score"
    score: float


class ScoreResponse(BaseModel):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[Score]
    usage: Usage
