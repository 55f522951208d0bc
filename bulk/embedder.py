"""The stored embedder, ready for windows of rows: its tokenizer, prompt and backend, read from the model's directory.

``bulk.embed`` runs one in its process, ``bulk.spark`` one in each executor's Python worker. Both
need only the stored model's directory, not a BentoML store: BentoML's ``model.yaml`` in it holds
the tag and the spec recorded at import. No BentoML import here, nor the serving settings (which import it): an executor loads none of it.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import yaml

from models.backends import load_backend
from models.calibration import SCALES, compact, load_ranges, scale_problem
from models.inference import Backend, run_window
from models.postprocess import matryoshka_prefix
from models.spec import ModelSpec
from models.tokenization import Encoded, TextTokenizer

from .corpus import Row

# The vector column's types: float32, or a compact type the server also answers (``encoding_format``):
# int8/uint8 on the ranges stored with the model at import, or the signs as packed bits.
VECTOR_TYPES = ("float32", *SCALES, "binary", "ubinary")
NOT_FINITE = "the model's vector is not finite (NaN or infinity)"


def stored_model(directory: str | Path) -> tuple[str, ModelSpec]:
    """The tag and the spec of the stored model in ``directory`` (its ``model.yaml``)."""
    record = yaml.safe_load((Path(directory) / "model.yaml").read_text())
    return f"{record['name']}:{record['version']}", ModelSpec.from_metadata(record["metadata"])


def vector_type_problem(vector_type: str, ranges: np.ndarray | None, dimensions: int | None) -> str | None:
    """Why ``vector_type`` (one of ``VECTOR_TYPES``) cannot be written for this model and these options; None when it can."""
    if problem := scale_problem(vector_type, ranges, dimensions):
        reason, cut = problem
        return f"--vector-type {vector_type}" + (" with --dimensions" if cut else "") + f": {reason}"
    return None


class Embedder:
    """The model in ``directory`` loaded once: rows in, the server's vectors out. ``prompt`` and
    ``dimensions`` come checked (``bulk.embed.checked_prompt``); ``threads``: the backend's CPU threads;
    ``token_budget``: the most padded tokens in one forward pass (``TEXTBENTO_TOKEN_BUDGET`` where the job starts);
    ``vector_type``: one of ``VECTOR_TYPES``, checked (``vector_type_problem``)."""

    def __init__(
        self,
        directory: str | Path,
        backend: str,
        prompt: str,
        dimensions: int | None,
        truncate: bool,
        threads: int,
        token_budget: int,
        vector_type: str = "float32",
    ) -> None:
        self.tag, self.spec = stored_model(directory)
        self.prompt, self.dimensions, self.truncate, self.token_budget = prompt, dimensions, truncate, token_budget
        self.vector_type, self.ranges = vector_type, load_ranges(directory)
        self.tokenizer = TextTokenizer(directory, self.spec.max_length)
        self.backend: Backend = load_backend(backend, directory, self.spec, threads)

    def with_options(self, prompt: str, dimensions: int | None, truncate: bool, token_budget: int, vector_type: str) -> Embedder:
        """The same loaded model with other options (a shallow copy: one tokenizer, one backend)."""
        other = copy.copy(self)
        other.prompt, other.dimensions, other.truncate, other.token_budget = prompt, dimensions, truncate, token_budget
        other.vector_type = vector_type
        return other

    @property
    def metadata(self) -> dict:
        """What each part's Parquet metadata records."""
        return {
            "model": self.tag,
            "backend": self.backend.name,
            "precision": self.backend.precision,
            "prompt": self.prompt,
            "vector_type": self.vector_type,
        }

    @property
    def vector_bytes(self) -> int:
        """Bytes of one vector as written."""
        dimensions = self.dimensions or self.spec.dimensions
        if self.vector_type == "float32":
            return 4 * dimensions
        return dimensions if self.vector_type in SCALES else -(-dimensions // 8)  # packed bits: 8 to a byte

    def tokenized(self, window: list[Row]) -> tuple[list[Row], list[Encoded], list[Row]]:
        """(rows to embed, their tokens, rows refused): past the model's limit is refused when truncation is off,
        and a text the tokenizer refuses is refused with its reason."""
        texts, encoded, refused = self.encoded([row for row in window if row.problem is None])
        refused += [row for row in window if row.problem is not None]
        if not self.truncate:
            long = {index for index, e in enumerate(encoded) if e.truncated}
            limit = f"longer than the model's {self.spec.max_length} tokens (truncation is off)"
            refused += [Row(texts[index].number, texts[index].id, None, limit) for index in sorted(long)]
            texts = [row for index, row in enumerate(texts) if index not in long]
            encoded = [e for index, e in enumerate(encoded) if index not in long]
        return texts, encoded, sorted(refused, key=lambda row: row.number)

    def encoded(self, texts: list[Row]) -> tuple[list[Row], list[Encoded], list[Row]]:
        """(rows, their tokens, rows refused): the texts in one call to the tokenizer; should it refuse the call,
        each text alone, and the ones it refuses with its reason (``checked`` leaves none it is known to refuse)."""
        try:
            return texts, self.tokenizer.encode([self.prompt + row.text for row in texts]), []
        except Exception:  # any error: which text caused it, and why, is found next
            pass
        kept, encoded, refused = [], [], []
        for row in texts:
            try:
                encoded += self.tokenizer.encode([self.prompt + row.text])
                kept.append(row)
            except Exception as error:  # any error: the row is rejected with it
                refused.append(Row(row.number, row.id, None, f"the tokenizer refused it: {error}"))
        return kept, encoded, refused

    def vectors(self, encoded: list[Encoded]) -> np.ndarray:
        """One row per text: the length-sorted passes under the token budget (``run_window``), the Matryoshka cut, as ``vector_type``."""
        return self.typed(self.float_vectors(encoded))

    def embedded(self, texts: list[Row], encoded: list[Encoded]) -> tuple[list[Row], list[Encoded], np.ndarray, list[Row]]:
        """(rows, their tokens, their vectors as ``vector_type``, rows refused): a row whose vector is not finite
        (NaN or infinity) is refused, never written."""
        floats = self.float_vectors(encoded)
        finite = np.isfinite(floats).all(axis=1)
        if finite.all():
            return texts, encoded, self.typed(floats), []
        refused = [Row(row.number, row.id, None, NOT_FINITE) for row, kept in zip(texts, finite, strict=True) if not kept]
        texts = [row for row, kept in zip(texts, finite, strict=True) if kept]
        encoded = [e for e, kept in zip(encoded, finite, strict=True) if kept]
        return texts, encoded, self.typed(floats[finite]), refused

    def float_vectors(self, encoded: list[Encoded]) -> np.ndarray:
        """float32 rows, one per text: the length-sorted passes under the token budget (``run_window``), the Matryoshka cut."""
        if not encoded:
            return np.empty((0, self.dimensions or self.spec.dimensions), np.float32)
        rows = run_window(self.backend, [e.ids for e in encoded], self.spec.pad_id, self.token_budget)
        return np.stack([matryoshka_prefix(row, self.dimensions, self.spec.normalize) for row in rows]).astype(np.float32)

    def rate(self, encoded: list[Encoded]) -> float | None:
        """Texts/s of ``vectors`` on ``encoded`` here, after a warm-up (the first pass is the slowest): what a dry run estimates from."""
        if not encoded:
            return None
        self.vectors(encoded[:8])
        started = time.perf_counter()
        self.vectors(encoded)
        return len(encoded) / (time.perf_counter() - started)

    def typed(self, vectors: np.ndarray) -> np.ndarray:
        """float32 ``vectors`` as ``vector_type``, as the server answers that ``encoding_format``."""
        return vectors if self.vector_type == "float32" else compact(vectors, self.vector_type, self.ranges)
