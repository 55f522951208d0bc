"""What both fine-tuning commands share: the base model, seeding, scores, and the stored record of a run."""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from models.detection import UnsupportedModel
from models.store import default_model_dir, download, import_model, library_versions

from .data import BadData, sha256

# What a training command reports as one line (train_import/cli.py) instead of a traceback.
FAILURES = (BadData, UnsupportedModel, OSError)

EMBEDDED_BASE = "sentence-transformers/all-MiniLM-L6-v2"
TRAINING_LIBRARIES = ("torch", "transformers", "sentence-transformers")


def resolve_base(base: str | None) -> tuple[Path, str]:
    """(a save_pretrained directory, its name) for ``--base``: a directory, a store tag, a Hub id, or the embedded model."""
    if base is None:
        return default_model_dir(), EMBEDDED_BASE
    if Path(base).is_dir():
        return Path(base), base
    if ":" in base or "/" not in base:  # a store tag (name or name:version), or a Hub id without an owner
        import bentoml

        try:
            return Path(bentoml.models.get(base).path), base
        except bentoml.exceptions.NotFound:
            if ":" in base:
                raise BadData(f"no model {base!r} in the BentoML store, and no such directory") from None
    return download(base), base


def training_parser(command: str, description: str, data: str, held_out: str, columns: dict[str, str]) -> argparse.ArgumentParser:
    """The options both training commands take; each adds its own training options."""
    parser = argparse.ArgumentParser(prog=f"python -m train_import.{command}", description=description)
    parser.add_argument("--data", type=Path, required=True, help=f"{data}: .csv with a header row, or .jsonl")
    parser.add_argument("--name", required=True, help="store name of the fine-tuned model")
    parser.add_argument("--eval", type=Path, help=f"held-out data (default: {held_out})".replace("%", "%%"))  # argparse formats help
    for option, column in columns.items():
        parser.add_argument(f"--{option}-column", default=column)
    parser.add_argument("--base", help="store tag, Hugging Face Hub id or directory (default: the embedded all-MiniLM-L6-v2)")
    parser.add_argument("--max-length", type=int, default=128, help="tokens per text in training (default 128)")
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def epoch_batches(count: int, epoch: int, args) -> tqdm:
    """The start of each batch of one epoch over ``count`` examples, with a progress bar on a terminal (none in a log)."""
    return tqdm(
        range(0, count, args.batch_size), desc=f"epoch {epoch}/{args.epochs}", unit="batch", file=sys.stderr, leave=False, disable=None
    )


def optimizer_step(loss: torch.Tensor, optimizer: torch.optim.Optimizer, bar: tqdm, schedule=None) -> None:
    loss.backward()
    optimizer.step()
    if schedule is not None:
        schedule.step()
    optimizer.zero_grad()
    bar.set_postfix(loss=f"{loss.item():.3f}")


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


def store_trained(save: Callable[[str], None], args, *, kind: str, task: str, base: str, started: float, **results):
    """The model that ``save(directory)`` writes, stored like an import, with the run as its ``training`` metadata."""
    record = {
        "kind": kind,
        "base": base,
        "data_sha256": sha256(args.data, args.eval),
        "options": options_of(args),
        **results,
        "seconds": round(time.monotonic() - started, 1),
        "versions": library_versions(TRAINING_LIBRARIES),
    }
    with tempfile.TemporaryDirectory(prefix="textbento-train-") as directory:
        save(directory)
        source = f"{base}, fine-tuned on {args.data.name}"
        return import_model(Path(directory), name=args.name, task=task, source=source, training=record)
