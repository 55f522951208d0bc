"""Text → token ids with the model's fast (Rust) tokenizer, truncated to the model's limit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from .batching import with_segments

# One text, or a pair (query, passage) tokenized together as a cross-encoder reads it.
TextInput = str | tuple[str, str]


@dataclass(frozen=True)
class Encoded:
    """One input as the runner sees it: its token ids (special tokens included; a pair's second text
    with its token type folded in, ``models.batching.with_segments``) and whether it was cut."""

    ids: np.ndarray
    truncated: bool

    @property
    def tokens(self) -> int:
        return len(self.ids)


class TextTokenizer:
    """Encodes batches of texts without padding; padding is the batcher's job, per sub-batch.

    Loads ``tokenizer.json`` with the ``tokenizers`` library alone: importing transformers would
    import torch and cost every API worker ~300 MiB for nothing. The Rust tokenizer also reports
    truncation (``overflowing``) without a second pass.
    """

    def __init__(self, model_dir: str | Path, max_length: int) -> None:
        self._backend = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
        self._backend.no_padding()
        self._backend.enable_truncation(max_length)
        self.max_length = max_length

    def encode(self, texts: Sequence[TextInput]) -> list[Encoded]:
        """Texts and pairs alike; a pair is truncated longest text first, as transformers does."""
        encoded = []
        for text, encoding in zip(texts, self._backend.encode_batch(list(texts))):
            ids = np.asarray(encoding.ids, dtype=np.int32)
            if isinstance(text, tuple):
                ids = with_segments(ids, np.asarray(encoding.type_ids, dtype=np.int32))
            encoded.append(Encoded(ids, bool(encoding.overflowing)))
        return encoded
