"""Every bad input gets a precise 4xx in the one error shape; nothing leaks; the server keeps serving.

The table below is the list of bad inputs tried; docs/reliability.md quotes it.
"""

import asyncio
import json
import os
import time

import numpy as np
import pytest
import requests

import api.tei
from api.catalog import Catalog, ServedModel
from api.errors import APIError
from api.flow import Admission
from api.pipeline import Pipeline
from api.routes import tei as tei_routes
from models.spec import ModelSpec
from models.store import default_model_dir
from models.tasks import task_of
from models.tokenization import TextTokenizer
from serving.gone import deadline
from serving.settings import settings
from serving.wire import ids_from_wire, rows_to_wire

JSON = {"content-type": "application/json"}
LONG = "word " * 600  # ~600 tokens: over MiniLM's 256

BAD_INPUTS = [
    # (name, path, raw body, headers, status, error type, the field it names where the check is exact)
    ("invalid JSON", "/v1/embeddings", b'{"input": ', JSON, 422, "invalid_json", None),
    ("non-UTF-8 bytes", "/v1/embeddings", b'{"input": "\xff\xfe"}', JSON, 422, "invalid_json", None),
    ("JSON that is not an object", "/v1/embeddings", b'["a"]', JSON, 422, "invalid_request", None),
    ("wrong type (number)", "/v1/embeddings", {"input": 42}, JSON, 422, "invalid_request", "input"),
    ("wrong item type", "/v1/embeddings", {"input": ["ok", 7]}, JSON, 422, "invalid_request", None),
    ("missing field", "/v1/embeddings", {}, JSON, 422, "invalid_request", None),
    ("empty string", "/v1/embeddings", {"input": ""}, JSON, 422, "invalid_request", "input.0"),
    ("empty list", "/v1/embeddings", {"input": []}, JSON, 422, "invalid_request", "input"),
    ("null item", "/v1/embeddings", {"input": ["ok", None]}, JSON, 422, "invalid_request", "input.1"),
    ("null input", "/v1/embeddings", {"input": None}, JSON, 422, "invalid_request", None),
    ("unknown field", "/v1/embeddings", {"input": "x", "temperature": 1}, JSON, 422, "invalid_request", None),
    ("bad encoding_format", "/v1/embeddings", {"input": "x", "encoding_format": "int4"}, JSON, 422, "invalid_request", "encoding_format"),
    (
        "int8 of fewer dimensions",
        "/v1/embeddings",
        {"input": "x", "encoding_format": "int8", "dimensions": 64},
        JSON,
        400,
        "invalid_request",
        "dimensions",
    ),
    ("negative top_k", "/v1/classify", {"inputs": "x", "top_k": -1}, JSON, 422, "invalid_request", None),
    ("257 inputs", "/v1/embeddings", {"input": ["x"] * 257}, JSON, 413, "too_many_inputs", None),
    ("20,001-character input", "/v1/embeddings", {"input": ["ok", "a" * 20_001]}, JSON, 413, "input_too_long", None),
    ("over max_length, truncate false", "/v1/embeddings", {"input": LONG, "truncate": False}, JSON, 413, "input_too_long", None),
    ("9 MiB body", "/v1/embeddings", b'{"input": "' + b"a" * (9 * 2**20) + b'"}', JSON, 413, "body_too_large", None),
    ("text/plain body", "/v1/embeddings", b'{"input": "x"}', {"content-type": "text/plain"}, 415, "unsupported_media_type", None),
    ("form body", "/v1/embeddings", b"input=x", {"content-type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type", None),
    (
        "BentoML pickle body",
        "/v1/embeddings",
        b"\x80\x05N.",
        {"content-type": "application/vnd.bentoml+pickle"},
        415,
        "unsupported_media_type",
        None,
    ),
    ("no content type", "/v1/embeddings", b'{"input": "x"}', {}, 415, "unsupported_media_type", None),
    ("wrong task", "/v1/classify", {"inputs": "x"}, JSON, 400, "wrong_task", None),
    ("unknown model name", "/v1/embeddings", {"input": "x", "model": "gpt-4"}, JSON, 404, "model_not_found", "model"),
    ("wrong dimensions", "/v1/embeddings", {"input": "x", "dimensions": 1536}, JSON, 400, "invalid_request", None),
    ("a number in the list", "/v1/embeddings", {"input": [1, 2]}, JSON, 422, "invalid_request", "input.0"),
    ("a misspelt field", "/v1/embeddings", {"inputs": "typo"}, JSON, 422, "invalid_request", "input"),
    ("top_k not a number", "/v1/classify", {"inputs": "x", "top_k": "many"}, JSON, 422, "invalid_request", "top_k"),
    ("sentiment text a number", "/api/v1/sentiment", {"text": 3}, JSON, 422, "invalid_request", "text"),
    # Text the tokenizer cannot read: half of a surrogate pair, which JSON's \u escapes can carry.
    ("lone surrogate in prompt", "/v1/embeddings", {"input": "x", "prompt": "\udc00"}, JSON, 422, "invalid_request", "prompt"),
    ("lone surrogate in a classify input", "/v1/classify", {"inputs": ["ok", "a\ud800"]}, JSON, 422, "invalid_request", "inputs.1"),
    ("lone surrogate in a pair", "/v1/classify", {"inputs": [["q", "\udfff"]]}, JSON, 422, "invalid_request", "inputs.0"),
    ("lone surrogate in sentiment text", "/api/v1/sentiment", {"text": "\ud800"}, JSON, 422, "invalid_request", "text"),
    ("lone surrogate in a rerank query", "/v1/rerank", {"query": "\ud800", "documents": ["d"]}, JSON, 422, "invalid_request", "query"),
]


def send(url, path, body, headers):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(url + path, data=data, headers=headers, timeout=60)


@pytest.mark.parametrize(("name", "path", "body", "headers", "status", "kind", "param"), BAD_INPUTS, ids=[row[0] for row in BAD_INPUTS])
def test_bad_input_gets_a_clear_4xx(embed_url, name, path, body, headers, status, kind, param):
    response = send(embed_url, path, body, headers)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == kind and error["message"]
    if param is not None:  # the field named, and first in the message
        assert error["param"] == param
        if status == 422:
            assert error["message"].startswith(param + ":")
    for leak in ("Traceback", "site-packages", os.environ["BENTOML_HOME"], "/tmp/"):
        assert leak not in response.text


def test_chunked_body_over_the_limit_gets_413(embed_url):
    def chunks():
        yield b'{"input": "'
        for _ in range(9):
            yield b"a" * 2**20
        yield b'"}'

    response = requests.post(f"{embed_url}/v1/embeddings", data=chunks(), headers=JSON, timeout=60)
    assert response.status_code == 413 and response.json()["error"]["type"] == "body_too_large"


def test_long_input_is_truncated_by_default(embed_url):
    response = send(embed_url, "/v1/embeddings", {"input": LONG}, JSON)
    assert response.status_code == 200 and response.json()["usage"]["prompt_tokens"] == 256


def test_wrong_method_is_json_405(embed_url):
    response = requests.get(f"{embed_url}/v1/embeddings", timeout=5)
    assert response.status_code == 405 and response.json()["error"]["type"] == "http_error"


def test_limits_at_the_boundary_are_accepted(embed_url):
    response = send(embed_url, "/v1/embeddings", {"input": ["x"] * 255 + ["a" * 20_000]}, JSON)
    assert response.status_code == 200 and len(response.json()["data"]) == 256


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/tokenize", {"inputs": ["ok", "a\ud800"]}, "inputs.1"),
        ("/embed", {"inputs": "\udc00"}, "inputs.0"),
        ("/similarity", {"inputs": {"source_sentence": "\ud800", "sentences": ["s"]}}, "inputs.source_sentence"),
        ("/predict", {"inputs": "\ud800"}, "inputs"),
        ("/v2/embed", {"texts": ["ok", "\ud800"]}, "texts.1"),
        ("/", {"inputs": "ok", "model": "\ud800"}, "model"),  # TEI's root picks its route by the model: checked first
    ],
)
def test_undecodable_text_on_tei_and_cohere_routes_gets_422_in_their_shape(embed_url, path, body, param):
    """Refused as the body is validated, before any model is picked: an embedder's server refuses /predict's too."""
    response = send(embed_url, path, body, JSON)
    assert response.status_code == 422, response.text
    message = response.json()["error" if path != "/v2/embed" else "message"]
    assert message.startswith(f"{param}: not valid Unicode: a lone surrogate")


@pytest.mark.parametrize("query", ["model=%FF", "model=%ED%A0%80", "model=ok&%C3=x"])
def test_a_query_parameter_that_is_not_utf8_gets_422_naming_it(embed_url, query):
    """A UTF-8-encoded surrogate or a stray byte would be read as U+FFFD and looked up as a model name."""
    response = requests.post(f"{embed_url}/?{query}", json={"inputs": "ok"}, timeout=30)
    assert response.status_code == 422, response.text
    assert response.json()["error"].endswith("not valid UTF-8 once percent-decoded")


def test_tokenize_lists_at_most_its_token_limit(embed_url):
    """14 texts of 10,002 tokens: the 14th passes TEXTBENTO_MAX_TOKENIZE_TOKENS (131,072), and is named."""
    over = send(embed_url, "/tokenize", {"inputs": ["a " * 10_000] * 14}, JSON)
    assert over.status_code == 413 and over.json()["error_type"] == "Validation", over.text[:300]
    assert "140028 tokens by input 13" in over.json()["error"] and "at most 131072 tokens" in over.json()["error"]
    within = send(embed_url, "/tokenize", {"inputs": ["a " * 10_000] * 13}, JSON)
    assert within.status_code == 200 and sum(map(len, within.json())) == 13 * 10_002


# The pipeline without a server: a model whose Encoder is a stand-in.
PASS = (0.0, 0.0, 1, 1, 1)  # a forward pass as the Encoder reports it (models.inference.Pass)


class StandInEncoder:
    """A model's shared calls to its Encoder: each text's row is ``row(ids)``; counts the texts sent."""

    def __init__(self, row=lambda ids: np.ones(4, dtype=np.float32)) -> None:
        self.row, self.sent = row, 0

    async def submit(self, wire, abandoned, within_s):
        self.sent += len(wire)
        rows = [self.row(text.ids) for text in ids_from_wire(wire)]
        return [(row, PASS) for row in rows_to_wire(rows)]


def stand_in(task: str = "embed", row=None, max_in_flight: int = 4, **spec) -> ServedModel:
    spec = ModelSpec(task=task, max_length=128, **spec)
    return ServedModel(
        "stand-in",
        "stand-in:v1",
        0,
        spec,
        tokenizer=TextTokenizer(default_model_dir(), 128),
        calls=StandInEncoder(*([row] if row else [])),
        encoder=None,
        forget=print,
        admission=Admission("stand-in", max_in_flight),
        sides=task_of(spec).side_tokenizers(default_model_dir(), spec),
    )


def StandInServer(model: ServedModel) -> Pipeline:
    return Pipeline(Catalog([model]))


def refused(call) -> APIError:
    with pytest.raises(APIError) as error:
        asyncio.run(call)
    return error.value


def test_a_non_finite_output_is_a_500_of_its_own_never_invalid_json():
    """NaN or infinity from the model: JSON has no such numbers, the model is at fault, and the text would fail again."""
    for bad in (np.nan, np.inf, -np.inf):
        model = stand_in(row=lambda ids, bad=bad: np.array([1.0, bad if len(ids) > 3 else 0.5], dtype=np.float32))
        error = refused(StandInServer(model).run(model, ["ok", "a longer text"], True, "input"))
        assert (error.status, error.type, error.param) == (500, "non_finite_output", "input.1")
        assert "'stand-in'" in error.message and "input 1" in error.message
    model = stand_in(row=lambda ids: np.full(4, np.nan, dtype=np.float32))
    server = StandInServer(model)
    request = api.tei.SimilarityRequest.model_validate({"inputs": {"source_sentence": "s", "sentences": ["t"]}})
    assert refused(tei_routes.similarity(request, server)).param == "inputs.source_sentence"


def test_the_query_beside_the_documents_is_not_counted_on_any_route(monkeypatch):
    """``max_inputs`` bounds the list a client sends: 3 documents and a query pass a limit of 3, on the
    cross-encoder, the multi-vector model and /similarity alike; a fourth document does not."""
    monkeypatch.setattr(settings, "max_inputs", 3)
    cross_encoder = stand_in("classify", labels=("score",), activation="sigmoid", row=lambda ids: np.ones(1, dtype=np.float32))
    colbert = stand_in("multivector", dimensions=4, query_length=8, row=lambda ids: np.ones(len(ids) * 4, dtype=np.float32))
    for model in (cross_encoder, colbert):
        server = StandInServer(model)
        relevance, _ = asyncio.run(server.relevance(model, "q", ["a", "b", "c"], "documents"))
        assert len(relevance) == 3
        error = refused(server.relevance(model, "q", ["a", "b", "c", "d"], "documents"))
        assert (error.status, error.type, error.param, error.message) == (
            413,
            "too_many_inputs",
            "documents",
            "4 inputs in one request; the limit is 3",
        )
    embedder = stand_in()
    request = api.tei.SimilarityRequest.model_validate({"inputs": {"source_sentence": "s", "sentences": ["a", "b", "c"]}})
    assert asyncio.run(tei_routes.similarity(request, StandInServer(embedder))).status_code == 200


def test_a_too_long_query_is_named_as_the_query(monkeypatch):
    monkeypatch.setattr(settings, "max_chars", 10)
    colbert = stand_in("multivector", dimensions=4, query_length=8, row=lambda ids: np.ones(len(ids) * 4, dtype=np.float32))
    error = refused(StandInServer(colbert).relevance(colbert, "q" * 11, ["a"], "texts"))
    assert (error.type, error.param, error.message) == ("input_too_long", "query", "the query has 11 characters; the limit is 10")


def test_token_vectors_past_the_answer_limit_are_refused_before_the_model_runs(monkeypatch):
    """A multi-vector answer is tokens × dimensions: bounded by ``max_answer_values``, checked once the texts are tokenized."""
    monkeypatch.setattr(settings, "max_answer_values", 100 * 16)
    colbert = stand_in("multivector", dimensions=16, query_length=8, row=lambda ids: np.ones(len(ids) * 16, dtype=np.float32))
    server = StandInServer(colbert)
    vectors, _ = asyncio.run(server.multivectors(colbert, ["word " * 48] * 2, "document", "input", prompt="", truncate=True))
    assert sum(len(rows) for rows in vectors) == 100  # 50 tokens each, [CLS] and [SEP] included: at the limit
    sent = colbert.calls.sent
    error = refused(server.multivectors(colbert, ["word " * 48] * 2 + ["x"], "document", "input", prompt="", truncate=True))
    assert (error.status, error.type, error.param) == (413, "answer_too_large", "input")
    assert "103 tokens × 16" in error.message and colbert.calls.sent == sent  # nothing sent to the Encoder


def test_sparse_weights_past_the_answer_limit_are_refused(monkeypatch):
    monkeypatch.setattr(settings, "max_answer_values", 1_000)
    splade = stand_in("sparse", row=lambda ids: np.ones(600, dtype=np.float32))
    request = api.tei.EmbedSparseRequest.model_validate({"inputs": ["one"]})
    assert asyncio.run(tei_routes.embed_sparse(request, StandInServer(splade))).status_code == 200
    error = refused(tei_routes.embed_sparse(api.tei.EmbedSparseRequest.model_validate({"inputs": ["one", "two"]}), StandInServer(splade)))
    assert (error.status, error.type, error.param) == (413, "answer_too_large", "inputs") and "1200 non-zero weights" in error.message


def test_tokenize_is_admitted_and_bounded_in_time_and_tokens_as_every_route(monkeypatch):
    request = api.tei.TokenizeRequest.model_validate({"inputs": ["one", "two words"]})
    answer = asyncio.run(tei_routes.tokenize(request, StandInServer(stand_in())))
    assert answer.status_code == 200 and [len(tokens) for tokens in json.loads(answer.body)] == [3, 4]
    full = stand_in(max_in_flight=0)
    assert refused(tei_routes.tokenize(request, StandInServer(full))).status == 429

    async def overdue():
        deadline.set(time.time() - 1)
        return await tei_routes.tokenize(request, StandInServer(stand_in()))

    assert refused(overdue()).status == 504
    monkeypatch.setattr(settings, "max_tokenize_tokens", 6)
    error = refused(tei_routes.tokenize(request, StandInServer(stand_in())))
    assert (error.status, error.type, error.param) == (413, "too_many_tokens", "inputs.1")
