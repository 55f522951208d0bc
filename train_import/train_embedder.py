"""Fine-tune a sentence embedder on (anchor, positive) pairs of your own, store it, and serve it.

    python -m train_import.train_embedder --data pairs.csv --name support-embedder
    TEXTBENTO_MODEL=support-embedder:latest make serve

sentence-transformers' MultipleNegativesRankingLoss (each anchor against its positive and every
other positive of its batch) in a plain PyTorch loop on the base embedder (default: the embedded
all-MiniLM-L6-v2; sentence-transformers' own trainer would add ``accelerate`` and ``datasets``).
Retrieval on held-out pairs (``--eval``, else 20% of ``--data``) before and after: recall@k, the
share of anchors whose own positive is among the k nearest of all held-out positives. Stores the
model like ``import_model`` does (its sentence-transformers pipeline, ONNX graphs) with the run's
data hash, options, scores and library versions as metadata; prints the new tag. Bad data gets one
line on stderr and exit status 1, with nothing stored.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import torch
from tqdm import tqdm

from models.detection import UnsupportedModel
from models.store import import_model
from train_import.cli import report
from train_import.data import BadData, read_rows, sha256
from train_import.training import library_versions, options_of, resolve_base, seed_everything

EVAL_SHARE = 0.2
RECALL_AT = (1, 5)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m train_import.train_embedder", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="pairs: .csv with a header row, or .jsonl")
    parser.add_argument("--name", required=True, help="store name of the fine-tuned model")
    parser.add_argument("--eval", type=Path, help=f"held-out pairs (default: {EVAL_SHARE:.0%} of --data)")
    parser.add_argument("--anchor-column", default="anchor")
    parser.add_argument("--positive-column", default="positive")
    parser.add_argument("--base", help="store tag, Hugging Face Hub id or directory (default: the embedded all-MiniLM-L6-v2)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=32, help="also the in-batch negatives: bigger is harder (default 32)")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def load(args: argparse.Namespace) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    columns = [args.anchor_column, args.positive_column]
    pairs = [(r[args.anchor_column], r[args.positive_column]) for r in read_rows(args.data, columns)]
    if args.eval:
        return pairs, [(r[args.anchor_column], r[args.positive_column]) for r in read_rows(args.eval, columns)]
    if len(pairs) < 10:
        raise BadData(f"{args.data} has {len(pairs)} pairs; hold some out with --eval, or give at least 10")
    shuffled = random.Random(args.seed).sample(pairs, len(pairs))
    cut = max(2, round(len(pairs) * EVAL_SHARE))
    return shuffled[cut:], shuffled[:cut]


def recall_at(model, pairs: list[tuple[str, str]]) -> dict[str, float]:
    """recall@k over the held-out pairs: each anchor against every held-out positive."""
    anchors = model.encode([a for a, _ in pairs], convert_to_tensor=True, normalize_embeddings=True)
    positives = model.encode([p for _, p in pairs], convert_to_tensor=True, normalize_embeddings=True)
    ranks = (anchors @ positives.T).argsort(dim=1, descending=True)
    own = torch.arange(len(pairs)).unsqueeze(1)
    return {f"recall@{k}": round(float((ranks[:, :k] == own).any(dim=1).float().mean()), 4) for k in RECALL_AT}


def fine_tune(model, pairs: list[tuple[str, str]], args: argparse.Namespace) -> None:
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    loss_function = MultipleNegativesRankingLoss(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    model.train()
    for epoch in range(1, args.epochs + 1):
        order = random.sample(pairs, len(pairs))
        bar = tqdm(
            range(0, len(order), args.batch_size),
            desc=f"epoch {epoch}/{args.epochs}",
            unit="batch",
            file=sys.stderr,
            leave=False,
            disable=None,
        )
        for start in bar:
            batch = order[start : start + args.batch_size]
            features = [model.tokenize([pair[side] for pair in batch]) for side in (0, 1)]
            loss = loss_function(features, labels=None)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def run():
        from sentence_transformers import SentenceTransformer

        train, held_out = load(args)
        base_dir, base = resolve_base(args.base)
        seed_everything(args.seed)
        model = SentenceTransformer(str(base_dir), device="cpu")
        model.max_seq_length = args.max_length
        before = recall_at(model, held_out)
        started = time.monotonic()
        fine_tune(model, train, args)
        after = recall_at(model, held_out)
        print(f"held-out retrieval ({len(held_out)} pairs): before {before}, after {after}", file=sys.stderr)
        record = {
            "kind": "embedder",
            "base": base,
            "data_sha256": sha256(args.data, args.eval),
            "train_pairs": len(train),
            "eval_pairs": len(held_out),
            "options": options_of(args),
            "before": before,
            "scores": after,
            "seconds": round(time.monotonic() - started, 1),
            "versions": library_versions(),
        }
        with tempfile.TemporaryDirectory(prefix="textbento-train-") as directory:
            model.save(directory)
            return import_model(
                Path(directory), name=args.name, task="embed", source=f"{base}, fine-tuned on {args.data.name}", training=record
            )

    return report("training", run, (BadData, UnsupportedModel, OSError))


if __name__ == "__main__":
    sys.exit(main())
