"""What both fine-tuning commands share: the base model, seeding, scores, and the stored record of a run."""

from __future__ import annotations

import importlib.metadata
import random
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from models.store import default_model_dir, download

from .data import BadData

EMBEDDED_BASE = "sentence-transformers/all-MiniLM-L6-v2"


def resolve_base(base: str | None) -> tuple[Path, str]:
    """(a save_pretrained directory, its name) for ``--base``: a directory, a store tag, a Hub id, or the embedded model."""
    if base is None:
        return default_model_dir(), EMBEDDED_BASE
    if Path(base).is_dir():
        return Path(base), base
    if ":" in base or "/" not in base:  # a store tag (name or name:version)
        import bentoml

        try:
            return Path(bentoml.models.get(base).path), base
        except bentoml.exceptions.NotFound:
            raise BadData(f"no model {base!r} in the BentoML store, and no such directory") from None
    return download(base), base


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def classification_scores(truth: list[str], predicted: list[str], labels: list[str]) -> dict:
    """Accuracy, macro-F1, and precision / recall / F1 / support per label."""
    per_label = {}
    for label in labels:
        hits = sum(1 for t, p in zip(truth, predicted) if t == p == label)
        said = sum(1 for p in predicted if p == label)
        real = sum(1 for t in truth if t == label)
        precision, recall = hits / said if said else 0.0, hits / real if real else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_label[label] = {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4), "support": real}
    return {
        "accuracy": round(sum(t == p for t, p in zip(truth, predicted)) / len(truth), 4),
        "macro_f1": round(sum(scores["f1"] for scores in per_label.values()) / len(labels), 4),
        "per_label": per_label,
    }


def majority_baseline(train_labels: list[str], truth: list[str], labels: list[str]) -> dict:
    """The scores of always answering the training data's most frequent label."""
    majority = Counter(train_labels).most_common(1)[0][0]
    return classification_scores(truth, [majority] * len(truth), labels)


def options_of(args) -> dict[str, str | int | float]:
    """The command's options as stored metadata (basic types only; options not given are left out)."""
    return {name: str(value) if isinstance(value, Path) else value for name, value in vars(args).items() if value is not None}


def library_versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in ("torch", "transformers", "sentence-transformers") if _installed(name)}


def _installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
