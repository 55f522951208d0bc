"""Every bad input gets a precise 4xx in the one error shape; nothing leaks; the server keeps serving.

The table below is the list of bad inputs tried; docs/reliability.md quotes it.
"""

import json
import os

import pytest
import requests

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
