"""Cohere's v2 embed and rerank APIs (``POST /v2/embed``, ``POST /v2/rerank``) and v1's embed (``POST /v1/embed``),
shape for shape, for the official ``cohere`` client (``cohere.ClientV2(base_url=...)``, ``cohere.Client``):
their request bodies, their answers, and their error shape, ``{"id", "message"}``.

Differences, each on purpose: texts only (``images`` and ``inputs`` are refused, 422 naming them);
``model`` may be left out (the first embedder served); ``input_type`` picks the model's
sentence-transformers prompt for that role (``api.options.ROLE_PROMPTS``), the model's default prompt where it
has none; ``max_tokens`` past the model's limit means the limit, and one that leaves no room beside
the special tokens is refused (400); ``int8`` and
``uint8`` are computed on ranges measured at import (``models.calibration``), so a model imported
without them, or asked for fewer dimensions, is refused them (400). Rerank: ``max_tokens_per_doc``
reads each document in its first that many tokens (the model's own tokenizer), as Cohere's does, and
``relevant_spans`` enabled is refused (422): a document is scored whole. ``priority`` is accepted on
both: every request is served in arrival order, as at Cohere's highest priority.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from annotated_types import MaxLen, MinLen
from pydantic import BaseModel, Field

from .types import EmbeddingType, Request, Text, TextList, Unicode

InputType = Literal["search_document", "search_query", "classification", "clustering"]


EmbeddingTypes = Annotated[list[EmbeddingType], MinLen(1), MaxLen(len(get_args(EmbeddingType)))]


class EmbedFields(Request):
    """The fields v1's and v2's embed share."""

    texts: TextList
    model: Unicode | None = None
    input_type: InputType | None = Field(None, description="the role of the texts: picks the model's prompt for it")
    truncate: Literal["NONE", "START", "END"] | None = Field(
        "END", description="NONE: texts past the model's limit are refused (413); null (langchain-cohere's default): END"
    )


class EmbedRequest(EmbedFields):
    """``POST /v2/embed``."""

    embedding_types: EmbeddingTypes = ["float"]
    output_dimension: Annotated[int, Field(ge=1)] | None = Field(None, description="fewer dimensions (Matryoshka models)")
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    priority: int | None = Field(None, description="accepted for the client's sake; every request is served in arrival order")


class EmbedV1Request(EmbedFields):
    """``POST /v1/embed``: v2's without ``output_dimension``, ``max_tokens`` and ``priority``."""

    embedding_types: EmbeddingTypes | None = Field(None, description="without it: the float vectors, as a bare list")

    def as_v2(self) -> EmbedRequest:
        """The same request as /v2/embed reads it (validated already: its fields are v2's)."""
        return EmbedRequest.model_construct(**{**dict(self), "embedding_types": self.embedding_types or ["float"]})


class BilledUnits(BaseModel):
    input_tokens: int


class ApiVersion(BaseModel):
    version: str = "2"


class Meta(BaseModel):
    api_version: ApiVersion
    billed_units: BilledUnits


class EmbeddingsByType(BaseModel):
    """One list per type asked for, a row per text in request order."""

    model_config = {"populate_by_name": True}

    float_: list[list[float]] | None = Field(None, alias="float")
    int8: list[list[int]] | None = None
    uint8: list[list[int]] | None = None
    binary: list[list[int]] | None = None
    ubinary: list[list[int]] | None = None
    base64: list[str] | None = None


class EmbedResponse(BaseModel):
    id: str
    embeddings: EmbeddingsByType
    texts: list[str]
    meta: Meta
    response_type: Literal["embeddings_by_type"] = "embeddings_by_type"


class EmbedFloatsResponse(BaseModel):
    """v1's answer without ``embedding_types``."""

    id: str
    embeddings: list[list[float]]
    texts: list[str]
    meta: Meta
    response_type: Literal["embeddings_floats"] = "embeddings_floats"


class RelevantSpans(Request):
    mode: Literal["enabled", "disabled"]
    threshold: float | None = None
    max_spans: Annotated[int, Field(ge=1)] | None = None


class RerankRequest(Request):
    """``POST /v2/rerank``."""

    model: Unicode | None = None
    query: Text
    documents: TextList
    top_n: Annotated[int, Field(ge=1)] | None = Field(None, description="return only the n most relevant documents")
    max_tokens_per_doc: Annotated[int, Field(ge=1)] | None = Field(
        None, description="read each document in its first n tokens (its own; the model's limit applies to the pair)"
    )
    relevant_spans: RelevantSpans | None = Field(None, description="refused when enabled: each document is scored whole")
    priority: int | None = Field(None, description="accepted for the client's sake; every request is served in arrival order")


class RerankResult(BaseModel):
    index: int
    relevance_score: float


class SearchUnits(BaseModel):
    search_units: int


class RerankMeta(BaseModel):
    api_version: ApiVersion
    billed_units: SearchUnits


class RerankResponse(BaseModel):
    id: str
    results: list[RerankResult]
    meta: RerankMeta
