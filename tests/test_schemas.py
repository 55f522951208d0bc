"""Request and response models: what is accepted, what is refused and how errors name the field."""

import re
from pathlib import Path
from typing import Annotated, Literal, get_args, get_origin

import pytest
from annotated_types import MaxLen
from pydantic import BaseModel, PlainValidator, ValidationError

import api.cohere
import api.tei
import api.types
from api.errors import APIError
from api.types import DECODABLE, ClassifyRequest, EmbeddingsRequest, Request, SentimentRequest


def test_single_text_becomes_a_list():
    assert ClassifyRequest(inputs="hi").inputs == ["hi"]
    assert EmbeddingsRequest(input=["a", "b"]).input == ["a", "b"]


@pytest.mark.parametrize(
    ("body", "location"),
    [
        ({"inputs": ""}, ("inputs", 0)),
        ({"inputs": []}, ("inputs",)),
        ({"inputs": [None]}, ("inputs", 0)),
        ({"inputs": [1]}, ("inputs", 0)),
        ({"inputs": "x", "top_k": 0}, ("top_k",)),
        ({"inputs": "x", "input": "typo"}, ("input",)),
        ({}, ("inputs",)),
    ],
)
def test_classify_rejects(body, location):
    with pytest.raises(ValidationError) as error:
        ClassifyRequest.model_validate(body)
    assert error.value.errors()[0]["loc"] == location


def test_embeddings_accepts_openai_fields_and_rejects_unknown_formats():
    request = EmbeddingsRequest(input="x", model="m", encoding_format="base64", user="u", dimensions=384)
    assert request.encoding_format == "base64"
    with pytest.raises(ValidationError):
        EmbeddingsRequest(input="x", encoding_format="int4")


def test_sentiment_needs_text():
    with pytest.raises(ValidationError):
        SentimentRequest.model_validate({"text": ""})


# Every request model, nested ones too: each is a ``Request`` (unknown fields refused).
def request_models(base: type = Request) -> list[type]:
    found = []
    for model in base.__subclasses__():
        found += [model, *request_models(model)]
    return found


REQUEST_MODELS = request_models()
# Validators that read the raw value themselves: each checks its strings (and counts a batch) by hand,
# as test_every_route_refuses_undecodable_text_naming_the_field and test_a_list_too_long_... try.
CHECKED_BY_HAND = {"_text_or_pair", "_predict_inputs", "_text_or_ids"}


def unchecked(annotation, around=(), where="") -> list[str]:
    """Where ``annotation`` holds a ``str`` not annotated with ``DECODABLE``, or a ``list`` neither counted
    (``api.types.counted``) nor of a bounded length; ``around`` is the metadata directly around it."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        inner, *metadata = args
        plain = [m for m in metadata if isinstance(m, PlainValidator)]
        if plain:
            return [] if plain[-1].func.__name__ in CHECKED_BY_HAND else [f"{where}: {plain[-1].func.__name__}"]
        return unchecked(inner, (*around, *metadata), where)
    if annotation is str:
        return [] if any(m is DECODABLE for m in around) else [f"{where}: str"]
    if origin is Literal:
        return []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [problem for name, field in annotation.model_fields.items() for problem in unchecked_field(field, f"{where}.{name}")]
    problems = []
    if origin is list:
        counted = any(getattr(getattr(m, "func", None), "__qualname__", "").startswith("counted.") for m in around)
        problems += [] if counted or any(isinstance(m, MaxLen) for m in around) else [f"{where}: a list of any length"]
    return problems + [problem for arg in args for problem in unchecked(arg, (), where)]


def unchecked_field(field, where: str) -> list[str]:
    return unchecked(field.annotation, tuple(field.metadata), where)


@pytest.mark.parametrize("model", REQUEST_MODELS, ids=lambda model: f"{model.__module__}.{model.__name__}")
def test_every_string_of_every_request_is_checked_and_every_list_bounded_before_its_items(model):
    """No route can forget either check: a string field is a ``Unicode`` or ``Text`` (422 for text the
    tokenizer cannot read), a list is counted against ``max_inputs`` before its items are read."""
    assert unchecked(model, where=model.__name__) == []


SURROGATE = "a\ud800b"
UNDECODABLE = [
    (api.types.ClassifyRequest, {"inputs": ["ok", SURROGATE]}, ("inputs", 1)),
    (api.types.ClassifyRequest, {"inputs": [["ok", SURROGATE]]}, ("inputs", 0)),
    (api.types.EmbeddingsRequest, {"input": "x", "prompt": "\udc00"}, ("prompt",)),
    (api.types.EmbeddingsRequest, {"input": "x", "prompt_name": SURROGATE}, ("prompt_name",)),
    (api.types.EmbeddingsRequest, {"input": "x", "model": SURROGATE}, ("model",)),
    (api.types.EmbeddingsRequest, {"input": "x", "user": SURROGATE}, ("user",)),
    (api.types.MultiVectorRequest, {"input": [SURROGATE]}, ("input", 0)),
    (api.types.RerankRequest, {"query": SURROGATE, "documents": ["d"]}, ("query",)),
    (api.types.RerankRequest, {"query": "q", "documents": ["d", SURROGATE]}, ("documents", 1)),
    (api.types.SentimentRequest, {"text": SURROGATE}, ("text",)),
    (api.tei.EmbedRequest, {"inputs": SURROGATE}, ("inputs", 0)),
    (api.tei.EmbedSparseRequest, {"inputs": ["x"], "prompt_name": SURROGATE}, ("prompt_name",)),
    (api.tei.EmbedAllRequest, {"inputs": [SURROGATE]}, ("inputs", 0)),
    (api.tei.PredictRequest, {"inputs": SURROGATE}, ("inputs",)),
    (api.tei.PredictRequest, {"inputs": [["ok"], ["ok", SURROGATE]]}, ("inputs",)),
    (api.tei.RerankRequest, {"query": "q", "texts": [SURROGATE]}, ("texts", 0)),
    (api.tei.SimilarityRequest, {"inputs": {"source_sentence": SURROGATE, "sentences": ["s"]}}, ("inputs", "source_sentence")),
    (api.tei.SimilarityRequest, {"inputs": {"source_sentence": "s", "sentences": [SURROGATE]}}, ("inputs", "sentences", 0)),
    (api.tei.TokenizeRequest, {"inputs": SURROGATE}, ("inputs", 0)),
    (api.tei.TokenizeRequest, {"inputs": "x", "prompt_name": SURROGATE}, ("prompt_name",)),
    (api.cohere.EmbedRequest, {"texts": ["ok", SURROGATE]}, ("texts", 1)),
    (api.cohere.RerankRequest, {"query": "q", "documents": ["d", SURROGATE]}, ("documents", 1)),
    (api.cohere.RerankRequest, {"query": SURROGATE, "documents": ["d"]}, ("query",)),
]


@pytest.mark.parametrize(
    ("model", "body", "location"),
    UNDECODABLE,
    ids=[f"{model.__module__}.{model.__name__}:{'.'.join(map(str, at))}" for model, _, at in UNDECODABLE],
)
def test_every_route_refuses_undecodable_text_naming_the_field(model, body, location):
    with pytest.raises(ValidationError) as error:
        model.model_validate(body)
    (first,) = error.value.errors()
    assert (first["loc"], first["type"]) == (location, "string_unicode")
    assert "lone surrogate (U+D" in first["msg"]


def test_valid_unicode_beyond_ascii_is_kept_as_it_is():
    texts = ["déjà vu 🙂", "日本語", "\u200b"]  # accents, a pair of surrogates in UTF-16 (one code point here), zero-width
    assert api.types.EmbeddingsRequest(input=texts, prompt="🙂 ").input == texts


TOO_MANY = 200_000
# Each list of texts, TOO_MANY long, its last item invalid: validated item by item, it would be a 422 naming that item.
LISTS = [
    (api.types.ClassifyRequest, lambda texts: {"inputs": texts}, "inputs"),
    (api.types.EmbeddingsRequest, lambda texts: {"input": texts}, "input"),
    (api.types.MultiVectorRequest, lambda texts: {"input": texts}, "input"),
    (api.types.RerankRequest, lambda texts: {"query": "q", "documents": texts}, "documents"),
    (api.tei.EmbedRequest, lambda texts: {"inputs": texts}, "inputs"),
    (api.tei.EmbedSparseRequest, lambda texts: {"inputs": texts}, "inputs"),
    (api.tei.EmbedAllRequest, lambda texts: {"inputs": texts}, "inputs"),
    (api.tei.PredictRequest, lambda texts: {"inputs": [[text] for text in texts]}, "inputs"),
    (api.tei.RerankRequest, lambda texts: {"query": "q", "texts": texts}, "texts"),
    (api.tei.SimilarityRequest, lambda texts: {"inputs": {"source_sentence": "s", "sentences": texts}}, "inputs.sentences"),
    (api.tei.TokenizeRequest, lambda texts: {"inputs": texts}, "inputs"),
    (api.cohere.EmbedRequest, lambda texts: {"texts": texts}, "texts"),
    (api.cohere.RerankRequest, lambda texts: {"query": "q", "documents": texts}, "documents"),
]


@pytest.mark.parametrize(("model", "body", "param"), LISTS, ids=[row[0].__module__ + "." + row[0].__name__ for row in LISTS])
def test_a_list_too_long_is_refused_before_its_items_are_read(model, body, param):
    """413 ``too_many_inputs`` from the list's length alone: its items, the invalid last one included, are
    never validated (a body of millions of tiny texts would otherwise be validated on the event loop)."""
    with pytest.raises(APIError) as error:
        model.model_validate(body(["x"] * (TOO_MANY - 1) + [7]))
    refused = error.value
    assert (refused.status, refused.type, refused.param) == (413, "too_many_inputs", param)
    assert refused.message == f"{TOO_MANY} inputs in one request; the limit is 256"
    model.model_validate(body(["x"] * 256))  # the limit itself is accepted


def test_a_predict_pair_is_one_input_however_few_inputs_are_allowed(monkeypatch):
    monkeypatch.setattr(api.tei.settings, "max_inputs", 1)
    assert api.tei.PredictRequest.model_validate({"inputs": ["query", "passage"]}).inputs.items == [("query", "passage")]
    with pytest.raises(APIError):
        api.tei.PredictRequest.model_validate({"inputs": [["a"], ["b"]]})


# The request model behind each route of docs/api.md's compatibility table.
ROUTE_MODELS = {
    "/v1/embeddings": api.types.EmbeddingsRequest,
    "/v2/embed": api.cohere.EmbedRequest,
    "/v1/embed": api.cohere.EmbedV1Request,
    "/v2/rerank": api.cohere.RerankRequest,
    "/v1/rerank": api.types.RerankRequest,
    "/score": api.types.ScoreRequest,
    "/embed": api.tei.EmbedRequest,
    "/rerank": api.tei.RerankRequest,
    "/decode": api.tei.DecodeRequest,
}


def compatibility_table() -> dict[str, dict[str, str]]:
    """docs/api.md's compatibility table: per route, each field's status."""
    text = (Path(__file__).parent.parent / "docs" / "api.md").read_text()
    rows = re.findall(r"^\| `(/[^`]*)` \| ((?:`[^`]+`(?:, )?)+) \| (honoured|mapped|accepted|refused) \|", text, re.MULTILINE)
    table: dict[str, dict[str, str]] = {}
    for route, fields, status in rows:
        for field in re.findall(r"`([^`]+)`", fields):
            table.setdefault(route, {})[field] = status
    return table


def test_the_compatibility_table_lists_every_field_and_each_refused_one_is_refused():
    table = compatibility_table()
    assert set(table) == set(ROUTE_MODELS)
    for route, model in ROUTE_MODELS.items():
        assert set(model.model_fields) <= set(table[route]), (route, set(model.model_fields) - set(table[route]))
        for field, status in table[route].items():
            if field not in model.model_fields:  # not a field: refused as every unknown field is
                assert status == "refused" and model.model_config.get("extra") == "forbid", (route, field)
            elif status == "refused":  # refused by value (true, enabled, set): its schema says so
                assert "refused" in (model.model_fields[field].description or ""), (route, field)


def test_the_client_table_names_the_versions_pinned():
    """docs/api.md's client table: each client at the version pinned where it runs (.venv/clients' dependencies aside)."""
    root = Path(__file__).parent.parent
    pins = {}
    for requirements in ("requirements-clients.txt", "requirements.txt", "requirements-dev.txt"):  # the project's own pins last
        for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", (root / requirements).read_text(), re.MULTILINE):
            pins[name.lower().replace("_", "-")] = version
    rows = re.findall(r"^\| `([a-z0-9_-]+)` ([0-9][^ ]*) \|", (root / "docs" / "api.md").read_text(), re.MULTILINE)
    assert len(rows) == 7
    for client, version in rows:
        assert pins[client.replace("_", "-")] == version, client
