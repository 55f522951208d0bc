"""Model outputs → answers: scores and labels for classifiers, pooling and normalisation for embedders,
the non-zero entries of sparse (SPLADE) vectors, a multi-vector model's token vectors and their MaxSim."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .spec import Activation, DenseActivation, Pooling


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax, stable for large logits."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Element-wise logistic function, stable for large logits of either sign."""
    return np.exp(-np.logaddexp(0, -logits))


# sentence-transformers Dense modules after pooling: weights ``w{i}`` [out, in] and biases ``b{i}``,
# written into the stored model at import (``models.store``), read by every backend.
DENSE_FILE = "dense.npz"
DENSE_ACTIVATIONS = {
    "identity": lambda x: x,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": sigmoid,
}
DenseLayer = tuple[np.ndarray, np.ndarray, DenseActivation]


def scores(logits: np.ndarray, activation: Activation) -> np.ndarray:
    """A classifier's scores from its logits, as its library computes them (``ModelSpec.activation``)."""
    return sigmoid(logits) if activation == "sigmoid" else softmax(logits)


def best_first(scores: Sequence[float]) -> list[int]:
    """The indices of ``scores``, highest first (ties in input order): rerank results' order."""
    return sorted(range(len(scores)), key=lambda index: -scores[index])


def ranked_labels(probabilities: np.ndarray, labels: Sequence[str], top_k: int) -> list[tuple[str, float]]:
    """The ``top_k`` (label, probability) pairs of one row, most probable first."""
    order = np.argsort(-probabilities, kind="stable")[:top_k]
    return [(labels[index], float(probabilities[index])) for index in order]


def pool(hidden: np.ndarray, attention_mask: np.ndarray, mode: Pooling) -> np.ndarray:
    """``[rows, tokens, dim]`` hidden states → ``[rows, dim]``, padding excluded."""
    if mode == "cls":
        return hidden[:, 0]
    if mode == "lasttoken":  # right-padded: the last real token of each row
        return hidden[np.arange(len(hidden)), attention_mask.sum(axis=1) - 1]
    mask = attention_mask[..., None].astype(hidden.dtype)
    if mode == "max":
        return np.where(mask > 0, hidden, -np.inf).max(axis=1)
    if mode == "weightedmean":  # token i (from 1) weighs i, as sentence-transformers (SGPT) does
        mask = mask * np.arange(1, hidden.shape[1] + 1, dtype=hidden.dtype)[None, :, None]
    total = np.clip(mask.sum(axis=1), 1e-9, None)
    return (hidden * mask).sum(axis=1) / (np.sqrt(total) if mode == "mean_sqrt_len" else total)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Unit-length rows (zero rows stay zero), as sentence-transformers' Normalize module does."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.clip(norms, 1e-12, None)


def matryoshka_prefix(vector: np.ndarray, dimensions: int | None, normalize: bool) -> np.ndarray:
    """The first ``dimensions`` of a Matryoshka embedding, unit length again when the model normalizes."""
    if dimensions is None or dimensions >= len(vector):
        return vector
    cut = vector[:dimensions]
    return l2_normalize(cut) if normalize else cut


def packed_bits(vectors: np.ndarray, signed: bool) -> np.ndarray:
    """Each vector's signs as bits, 8 dimensions to a byte, as sentence-transformers'
    ``quantize_embeddings`` packs them (``binary``: each byte as int8, minus 128; ``ubinary``: as uint8)."""
    packed = np.packbits(vectors > 0, axis=-1)
    return (packed.astype(np.int16) - 128).astype(np.int8) if signed else packed


def load_dense(model_dir: str | Path, activations: tuple[DenseActivation, ...]) -> list[DenseLayer]:
    """The stored model's Dense layers, in order (none without ``dense.npz``)."""
    if not activations:
        return []
    with np.load(Path(model_dir) / DENSE_FILE) as arrays:
        return [(arrays[f"w{i}"], arrays[f"b{i}"], activation) for i, activation in enumerate(activations)]


def sentence_embeddings(
    hidden: np.ndarray, attention_mask: np.ndarray, mode: Pooling, normalize: bool, dense: list[DenseLayer] = ()
) -> np.ndarray:
    """Pooled float32 sentence embeddings from last hidden states, through the Dense layers, optionally normalised."""
    vectors = pool(hidden.astype(np.float32, copy=False), attention_mask, mode)
    for weight, bias, activation in dense:
        vectors = DENSE_ACTIVATIONS[activation](vectors @ weight.T + bias).astype(np.float32, copy=False)
    return l2_normalize(vectors) if normalize else vectors


def token_vectors(row: np.ndarray, ids: np.ndarray, skiplist: Sequence[int] = ()) -> np.ndarray:
    """A text's ``[tokens, dim]`` vectors from its flat row, less those of the ids in ``skiplist`` (a
    document's punctuation, which PyLate leaves out; queries keep every token)."""
    vectors = row.reshape(len(ids), -1)
    return vectors[~np.isin(ids, skiplist)] if len(skiplist) else vectors


def maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """ColBERT's late-interaction score: for each query token its best dot product with a document token, summed."""
    return float((query @ document.T).max(axis=1).sum())
