"""The stored embedder, ready for windows of rows: its tokenizer, prompt and backend, read from the model's directory.

``bulk.embed`` runs one in its process, ``bulk.spark`` one in each executor's Python worker. Both
need only the stored model's directory, not a BentoML store: BentoML's ``model.yaml`` in it holds
the tag and the spec recorded at import. No BentoML import here, nor the serving settings (which import it): an executor loads none of it.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import yaml

from models.backends import load_backend
from models.inference import Backend, run_batch
from models.postprocess import truncate_dimensions
from models.spec import ModelSpec
from models.tokenization import Encoded, TextTokenizer

from .corpus import Row


def stored_model(directory: str | Path) -> tuple[str, ModelSpec]:
    """The tag and the spec of the stored model in ``directory`` (its ``model.yaml``)."""
    record = yaml.safe_load((Path(directory) / "model.yaml").read_text())
    return f"{record['name']}:{record['version']}", ModelSpec.from_metadata(record["metadata"])


class Embedder:
    """The model in ``directory`` loaded once: rows in, the server's vectors out. ``prompt`` and
    ``dimensions`` come checked (``bulk.embed.checked_prompt``); ``threads``: the backend's CPU threads;
    ``token_budget``: the most padded tokens in one forward pass (``TEXTBENTO_TOKEN_BUDGET`` where the job starts)."""

    def __init__(
        self, directory: str | Path, backend: str, prompt: str, dimensions: int | None, truncate: bool, threads: int, token_budget: int
    ) -> None:
        self.tag, self.spec = stored_model(directory)
        self.prompt, self.dimensions, self.truncate, self.token_budget = prompt, dimensions, truncate, token_budget
        self.tokenizer = TextTokenizer(directory, self.spec.max_length)
        self.backend: Backend = load_backend(backend, directory, self.spec, threads)

    def with_options(self, prompt: str, dimensions: int | None, truncate: bool, token_budget: int) -> Embedder:
        """The same loaded model with other options (a shallow copy: one tokenizer, one backend)."""
        other = copy.copy(self)
        other.prompt, other.dimensions, other.truncate, other.token_budget = prompt, dimensions, truncate, token_budget
        return other

    @property
    def metadata(self) -> dict:
        """What each part's Parquet metadata records."""
        return {"model": self.tag, "backend": self.backend.name, "precision": self.backend.precision, "prompt": self.prompt}

    def tokenized(self, window: list[Row]) -> tuple[list[Row], list[Encoded], list[Row]]:
        """(rows to embed, their tokens, rows refused): past the model's limit is refused when truncation is off."""
        texts = [row for row in window if row.problem is None]
        encoded = self.tokenizer.encode([self.prompt + row.text for row in texts])
        refused = [row for row in window if row.problem is not None]
        if not self.truncate:
            long = {index for index, e in enumerate(encoded) if e.truncated}
            limit = f"longer than the model's {self.spec.max_length} tokens (truncation is off)"
            refused += [Row(texts[index].number, texts[index].id, None, limit) for index in sorted(long)]
            texts = [row for index, row in enumerate(texts) if index not in long]
            encoded = [e for index, e in enumerate(encoded) if index not in long]
        return texts, encoded, sorted(refused, key=lambda row: row.number)

    def vectors(self, encoded: list[Encoded]) -> np.ndarray:
        """One float32 row per text: the length-sorted passes under the token budget, the Matryoshka cut."""
        if not encoded:
            return np.empty((0, self.dimensions or self.spec.dimensions), np.float32)
        rows = run_batch(self.backend, [e.ids for e in encoded], self.spec.pad_id, self.token_budget)
        return np.stack([truncate_dimensions(row, self.dimensions, self.spec.normalize) for row in rows]).astype(np.float32)
