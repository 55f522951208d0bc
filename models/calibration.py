"""Per-dimension ranges for compact embeddings (int8, uint8): measured once at import over a
calibration set, stored with the model, applied to each text on its own.

sentence-transformers' ``quantize_embeddings`` takes the ranges from the embeddings it is given
unless it is given ranges: from a request's batch, a text's compact vector would depend on its
batch mates. Here the ranges are the model's, so a text always gets the same bytes. Within the
ranges the arithmetic is ``quantize_embeddings``' own with ``ranges=``; a value outside them
(a text unlike the calibration set) is clipped to the end of the scale, where ``quantize_embeddings``
would let the cast wrap it around to the other end.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from .postprocess import packed_bits
from .selfcheck import PROBE_TEXTS

RANGES_FILE = "calibration-ranges.npy"  # [2, dimensions]: each dimension's least and greatest value
BUILT_IN_TEXTS = 512
SCALES = {"int8": (np.int8, -128), "uint8": (np.uint8, 0)}


def built_in_texts(model_dir: str | Path, count: int = BUILT_IN_TEXTS, seed: int = 0) -> list[str]:
    """The self-check's probe texts, then texts of 3 to 40 words drawn from the model's own vocabulary
    (whole words only): a spread over what the model can embed, in the languages it was trained on,
    with no corpus to ship."""
    vocabulary = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json")).get_vocab()
    # WordPiece continues a word with "##"; byte-level BPE starts one with "Ġ", SentencePiece with "▁".
    words = sorted({token.lstrip("Ġ▁") for token in vocabulary if not token.startswith("##") and token.lstrip("Ġ▁").isalpha()})
    rng = random.Random(seed)
    drawn = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 40))) for _ in range(count - len(PROBE_TEXTS))]
    return [*PROBE_TEXTS, *drawn]


def ranges_of(vectors: np.ndarray) -> np.ndarray:
    """Each dimension's least and greatest value over the calibration vectors, as ``quantize_embeddings`` takes them."""
    return np.vstack((vectors.min(axis=0), vectors.max(axis=0))).astype(np.float32)


def save_ranges(model_dir: str | Path, ranges: np.ndarray) -> None:
    np.save(Path(model_dir) / RANGES_FILE, ranges)


def load_ranges(model_dir: str | Path) -> np.ndarray | None:
    """The stored model's ranges; None for a model stored without them (not an embedder, or imported before they were)."""
    path = Path(model_dir) / RANGES_FILE
    return np.load(path) if path.is_file() else None


def quantized(vectors: np.ndarray, kind: str, ranges: np.ndarray) -> np.ndarray:
    """``vectors`` as ``int8`` or ``uint8``: 256 equal steps between each dimension's ends (``ranges``),
    each value the step it falls in, so that a text's int8 vector is its uint8 vector less 128."""
    dtype, offset = SCALES[kind]
    starts, steps = ranges[0], (ranges[1] - ranges[0]) / 255
    levels = np.floor(np.clip((vectors - starts) / np.where(steps > 0, steps, 1), 0, 255))
    return (levels + offset).astype(dtype)


def compact(vectors: np.ndarray, kind: str, ranges: np.ndarray | None) -> np.ndarray:
    """Float vectors as a compact ``kind``: int8/uint8 on ``ranges`` (``quantized``), or ``binary``/``ubinary``,
    the signs packed 8 dimensions to a byte (``packed_bits``); what the API answers and ``bulk.embed`` writes."""
    if kind in SCALES:
        return quantized(vectors, kind, ranges)
    return packed_bits(vectors, signed=kind == "binary")


def scale_problem(kind: str, ranges: np.ndarray | None, dimensions: int | None) -> tuple[str, bool] | None:
    """Why the int8/uint8 ``kind`` cannot be computed for a model with these ``ranges`` cut to ``dimensions``,
    and whether the cut is why; None when it can (or ``kind`` is not one of ``SCALES``)."""
    if kind not in SCALES:
        return None
    if ranges is None:
        return "the model was imported without calibration ranges; import it again to get them", False
    if dimensions is not None:
        return "the ranges are those of the whole vector", True
    return None
