"""Direct transformers computations on the same weights: the ground truth the service must match."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

TEXTS = [
    "BentoML serves models.",
    "The quick brown fox jumps over the lazy dog, twice, then naps in the afternoon sun.",
    "short",
    "A much longer review: " + "the plot wanders, the acting is fine, and the ending surprises. " * 40,
    "Émojis 🙂 and accents, déjà vu, naïve café — unicode should tokenize like transformers does.",
]


def backend_outputs(tag: str, backend: str, texts: list[str]) -> np.ndarray:
    """One row per text, embeddings or logits, from a textbento backend run here on the stored model.

    All texts go through ``run_batch`` together, as the Encoder runs a batch.
    """
    import bentoml

    from models.backends import load_backend
    from models.inference import run_batch
    from models.spec import ModelSpec
    from models.tokenization import TextTokenizer

    stored = bentoml.models.get(tag)
    spec = ModelSpec.of(stored)
    ids = [encoded.ids for encoded in TextTokenizer(stored.path, spec.max_length).encode(texts)]
    return np.stack(run_batch(load_backend(backend, stored.path, spec, threads=2), ids, spec.pad_id, token_budget=2048))


@contextmanager
def damaged_int8(damage: Callable[[np.ndarray], np.ndarray]) -> Iterator[None]:
    """Within it, the ONNX backend's int8 graph answers ``damage(rows)``, as a worse graph would (the
    self-check's gates are held to what they must refuse)."""
    from unittest import mock

    from models.backends import onnx_backend

    forward = onnx_backend.OnnxBackend.forward

    def damaged(self, *batch):
        rows = forward(self, *batch)
        return damage(rows) if self.precision.startswith("int8") else rows

    with mock.patch.object(onnx_backend.OnnxBackend, "forward", damaged):
        yield


def assert_served_as_in_process(served: np.ndarray, card: dict, texts: list[str]) -> None:
    """The served rows equal the card's backend run here on the same texts: to 1e-5 where its
    compute is batch invariant (fp32, per-token int8), to the invariance gate (cosine 0.99999)
    where bf16 lets a row move with its batch mates (docs/design.md, 5c)."""
    expected = backend_outputs(card["tag"], card["backend"], texts)
    if card["precision"] != "bf16":
        assert np.abs(served - expected).max() <= 1e-5
        return
    cosines = (served * expected).sum(1) / np.linalg.norm(served, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosines.min() >= 0.99999, cosines.min()


@torch.inference_mode()
def sentence_embeddings(model_dir: Path, texts: list[str], max_length: int, batch_size: int = 32) -> np.ndarray:
    """sentence-transformers' all-MiniLM-L6-v2 recipe: mean pooling over real tokens, then L2 norm. Texts go
    in batches of ``batch_size`` sorted by length, as sentence-transformers encodes them: one batch of
    every text would pad 267 texts of 25 tokens on average to 256 (ten times the work, hours under
    ``make test-avx2``'s emulation), while a row does not depend on its batch's padding."""
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]]
    order = sorted(range(len(texts)), key=lengths.__getitem__)
    rows = np.empty((len(texts), model.config.hidden_size), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        batch = tokenizer([texts[i] for i in chosen], padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        rows[chosen] = F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    return rows


@torch.inference_mode()
def class_probabilities(model_dir: Path, texts: list[str], max_length: int = 512) -> np.ndarray:
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir)).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    return model(**batch).logits.softmax(-1).numpy()
