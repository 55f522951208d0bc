"""Answers written straight to JSON bytes from the results, without a second pass through pydantic.

A route that returns a ``Response`` is sent as is: FastAPI neither validates it against the
route's ``response_model`` again nor runs its JSON encoder over it. The ``response_model`` still
documents the shape in OpenAPI, and the schema tests hold the real answers to it. The same JSON
costs a small share of going through pydantic models and FastAPI's validation (docs/design.md 8).

Vectors stay numpy arrays up to here: orjson writes a float32 array's numbers with the fewest digits
that read back as the same float32s, as TEI and infinity do, where a Python float's repr spends
float64's 17 (docs/design.md 8: 0.30x the time and 0.59x the bytes for 32 embeddings).
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import orjson
from starlette.responses import Response

JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def json_response(payload: Any, headers: dict[str, str] | None = None) -> Response:
    """``payload`` (dicts, lists, str, int, float, numpy arrays and scalars) as an ``application/json`` response."""
    return Response(orjson.dumps(payload, default=as_list, option=JSON_OPTIONS), media_type="application/json", headers=headers)


def sparse_json(vector: np.ndarray) -> orjson.Fragment:
    """A sparse vector's non-zero weights as text-embeddings-inference answers them, ``[{"index": i, "value": v}, ...]``
    by ascending index, each value with its float32 digits; written here as JSON from two arrays, so that no object per
    weight lives in the answer (a SPLADE answer may hold millions of weights: ``max_answer_values``)."""
    indices = np.flatnonzero(vector)
    if not len(indices):
        return orjson.Fragment(b"[]")
    index_json = orjson.dumps(indices, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].split(b",")
    value_json = orjson.dumps(vector[indices], option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].split(b",")
    entries = [b'{"index":%b,"value":%b}' % pair for pair in zip(index_json, value_json, strict=True)]
    return orjson.Fragment(b"[" + b",".join(entries) + b"]")


def as_list(value: Any) -> list:
    """A numpy array orjson does not write itself (one not C-contiguous: a view cut to ``dimensions``, say), as a list."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def usage(tokens: int) -> dict[str, int]:
    """OpenAI's usage block: tokens processed (after truncation, special tokens included)."""
    return {"prompt_tokens": tokens, "total_tokens": tokens}


def base64_floats(vector: np.ndarray) -> str:
    """The base64 encoding of OpenAI's and Cohere's APIs: the little-endian float32 bytes of the vector."""
    return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
