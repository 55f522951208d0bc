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
import time

import torch

from train_import.cli import report
from train_import.data import BadData, read_rows
from train_import.training import FAILURES, epoch_batches, optimizer_step, resolve_base, seed_everything, store_trained, training_parser

EVAL_SHARE = 0.2
RECALL_AT = (1, 5)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    held_out = f"{EVAL_SHARE:.0%} of --data"
    parser = training_parser("train_embedder", __doc__.splitlines()[0], "pairs", held_out, {"anchor": "anchor", "positive": "positive"})
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="also the in-batch negatives: bigger is harder (default 32)")
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
        bar = epoch_batches(len(order), epoch, args)
        for start in bar:
            batch = order[start : start + args.batch_size]
            features = [model.tokenize([pair[side] for pair in batch]) for side in (0, 1)]
            optimizer_step(loss_function(features, labels=None), optimizer, bar)
    model.eval()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def run():
        train, held_out = load(args)  # bad data is refused before sentence-transformers takes seconds to import
        from sentence_transformers import SentenceTransformer

        base_dir, base = resolve_base(args.base)
        seed_everything(args.seed)
        model = SentenceTransformer(str(base_dir), device="cpu")
        model.max_seq_length = args.max_length
        before = recall_at(model, held_out)
        started = time.monotonic()
        fine_tune(model, train, args)
        after = recall_at(model, held_out)
        print(f"held-out retrieval ({len(held_out)} pairs): before {before}, after {after}", file=sys.stderr)
        return store_trained(
            model.save, args, kind="embedder", task="embed", base=base, started=started,
            train_pairs=len(train), eval_pairs=len(held_out), before=before, scores=after,
        )  # fmt: skip

    return report("training", run, FAILURES)


if __name__ == "__main__":
    sys.exit(main())
