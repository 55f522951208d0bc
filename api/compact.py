"""Embeddings in the type a request asks for: floats, base64 of little-endian float32, int8/uint8 on
the ranges stored with the model at import (``models.calibration``: a text's bytes never depend on
its batch mates), or its signs as packed bits, as sentence-transformers' ``quantize_embeddings``
makes each. Cohere's ``embedding_types`` and OpenAI's ``encoding_format`` both name them."""

from __future__ import annotations

import numpy as np

from models.calibration import compact, scale_problem

from .catalog import ServedModel
from .errors import APIError
from .responses import base64_floats


def refuse_unservable(model: ServedModel, kinds: list[str], dimensions: int | None, kinds_field: str, dimensions_field: str) -> None:
    """400 for int8/uint8 that cannot be served: a model imported without ranges, or fewer dimensions
    than the ranges were measured on."""
    for kind in kinds:
        if problem := scale_problem(kind, model.ranges, dimensions):
            reason, cut = problem
            asked = f"{kinds_field} {kind}" + (f" with {dimensions_field}" if cut else "")
            raise APIError(400, "invalid_request", f"{asked} (model {model.name!r}): {reason}", dimensions_field if cut else kinds_field)


def by_type(rows: np.ndarray, kind: str, ranges: np.ndarray | None) -> np.ndarray | list[str]:
    """The rows as ``kind``: an array of them (written to JSON as lists, ``api/responses.py``), or a base64
    string per row."""
    if kind == "float":
        return rows
    if kind == "base64":
        return [base64_floats(row) for row in rows]
    return compact(rows, kind, ranges)
