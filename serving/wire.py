"""What an Encoder call carries: one body each way, framed bytes (``serving/encoder_route.py`` sends them).

A call is its texts, each its request's key and deadline and its token ids; an answer is each text's
row and the forward pass that computed it. Each travels as one body, a frame: the count of parts,
their lengths, then the parts; no pickle, no per-array buffer, one write each way.

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

from models.inference import Pass

IDS, ROWS = np.dtype(np.int32), np.dtype(np.float32)
REQUEST = Struct("<qd")  # the request's key, its deadline (time.time())
COUNT, LENGTHS = Struct("<I"), np.dtype("<u4")  # a frame's parts: how many, and each one's length in bytes
PASSES, PASS_INDEX = np.dtype("<f8"), np.dtype("<i4")  # an answer's passes (5 numbers each), and each text's (-1: none)
NOT_COMPUTED = -1


class BadFrame(ValueError):
    """A body that is not a frame: its lengths do not add up to it."""


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


def frame(parts: Sequence[bytes | memoryview]) -> bytes:
    """``parts`` as one body: their count, their lengths, then each of them."""
    lengths = np.fromiter(map(len, parts), LENGTHS, len(parts))
    return b"".join([COUNT.pack(len(parts)), lengths.tobytes(), *parts])


def unframe(body: bytes) -> list[memoryview]:
    """The parts of a frame, as views of ``body`` (``BadFrame`` if it is not one)."""
    if len(body) < COUNT.size:
        raise BadFrame(f"a frame starts with its count of parts; the body has {len(body)} bytes")
    (count,) = COUNT.unpack_from(body)
    start = COUNT.size + count * LENGTHS.itemsize
    if len(body) < start:
        raise BadFrame(f"a frame of {count} parts has no room for their lengths in {len(body)} bytes")
    ends = start + np.cumsum(np.frombuffer(body, LENGTHS, count, COUNT.size), dtype=np.int64)
    if (ends[-1] if count else start) != len(body):
        raise BadFrame(f"the parts' lengths do not add up to the body's {len(body)} bytes")
    view = memoryview(body)
    return [view[begin:end] for begin, end in zip([start, *ends[:-1].tolist()], ends.tolist())]


def answer_to_wire(rows: Sequence[np.ndarray], passes: Sequence[Pass | None]) -> bytes:
    """Each text's row and the pass that computed it (None: nobody waited for it, ``serving/gone.py``)."""
    table = list(dict.fromkeys(p for p in passes if p is not None))
    index = {p: i for i, p in enumerate(table)}
    which = np.array([NOT_COMPUTED if p is None else index[p] for p in passes], PASS_INDEX)
    return frame([np.array(table, PASSES).tobytes(), which.tobytes(), *rows_to_wire(rows)])


def answer_from_wire(body: bytes) -> list[tuple[memoryview, Pass | None]]:
    table, which, *rows = unframe(body)
    passes = [Pass(started, finished, int(texts), int(padded), int(real)) for started, finished, texts, padded, real in
              np.frombuffer(table, PASSES).reshape(-1, len(Pass._fields)).tolist()]
    return [(row, None if i == NOT_COMPUTED else passes[i]) for row, i in zip(rows, np.frombuffer(which, PASS_INDEX).tolist())]
