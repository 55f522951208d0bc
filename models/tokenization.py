"""Text → token ids with the model's fast (Rust) tokenizer, truncated to the model's limit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from tokenizers import Tokenizer


@dataclass(frozen=True)
class Encoded:
    """One text as the runner sees it: its token ids (special tokens included) and whether it was cut."""

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

    def encode(self, texts: Sequence[str]) -> list[Encoded]:
        return [
            Encoded(np.asarray(encoding.ids, dtype=np.int32), bool(encoding.overflowing))
            for encoding in self._backend.encode_batch(list(texts))
        ]
