"""What an Encoder call carries: each text's token ids and each answer row as raw bytes.

BentoML sends a call pickled with protocol 5, and every ndarray in it as an out-of-band buffer of
its own, which uvicorn writes to the socket as a chunk of its own: a 64-text answer was 65 writes
(and as many ASGI messages), a share of the Encoder's CPU that the model needed. Bytes travel
inside the pickle: one chunk each way, more texts/s at several texts per request (docs/design.md 8).

Rows are float32 (the backends' contract, ``models/backends``); token ids are int32 (a pair's
token types folded in, ``models/batching.with_segments``). Each text's ids follow its request's
key and deadline, so that the Encoder can drop the texts of a request whose client is gone or
whose deadline has passed before computing them (``serving/gone.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from struct import Struct
from typing import NamedTuple

import numpy as np

IDS, ROWS = np.dtype(np.int32), np.dtype(np.float32)
REQUEST = Struct("<qd")  # the request's key, its deadline (time.time())


class Text(NamedTuple):
    """One text of a call, as the Encoder reads it."""

    key: int
    deadline: float
    ids: np.ndarray


def ids_to_wire(ids: Sequence[np.ndarray], key: int = 0, deadline: float = float("inf")) -> list[bytes]:
    """The texts of one request, each with its ``key`` and ``deadline``."""
    request = REQUEST.pack(key, deadline)
    return [request + np.asarray(one, dtype=IDS).tobytes() for one in ids]


def ids_from_wire(wire: Sequence[bytes]) -> list[Text]:
    return [Text(*REQUEST.unpack_from(one), np.frombuffer(one, dtype=IDS, offset=REQUEST.size)) for one in wire]


def rows_to_wire(rows: Sequence[np.ndarray]) -> list[bytes]:
    return [np.asarray(row, dtype=ROWS).tobytes() for row in rows]


def rows_from_wire(wire: Sequence[bytes]) -> list[np.ndarray]:
    return [np.frombuffer(row, dtype=ROWS) for row in wire]
