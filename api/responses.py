"""Answers written straight to JSON bytes from the results, without a second pass through pydantic.

A route that returns a ``Response`` is sent as is: FastAPI neither validates it against the
route's ``response_model`` again nor runs its JSON encoder over it. The ``response_model`` still
documents the shape in OpenAPI, and the schema tests hold the real answers to it. The same JSON
costs a small share of going through pydantic models and FastAPI's validation (docs/design.md 8).
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pydantic_core
from starlette.responses import Response


def json_response(payload: Any, headers: dict[str, str] | None = None) -> Response:
    """``payload`` (dicts, lists, str, int, float) as an ``application/json`` response."""
    return Response(pydantic_core.to_json(payload), media_type="application/json", headers=headers)


def usage(tokens: int) -> dict[str, int]:
    """OpenAI's usage block: tokens processed (after truncation, special tokens included)."""
    return {"prompt_tokens": tokens, "total_tokens": tokens}


def base64_floats(vector: np.ndarray) -> str:
    """The base64 encoding of OpenAI's and Cohere's APIs: the little-endian float32 bytes of the vector."""
    return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
