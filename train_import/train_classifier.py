"""Fine-tune a text classifier on your own labelled texts, store it, and serve it.

    python -m train_import.train_classifier --data tickets.csv --name tickets
    python -m train_import.train_classifier --data train.jsonl --eval eval.jsonl --name tickets \\
        --text-column body --label-column category --base sentence-transformers/all-MiniLM-L6-v2
    TEXTBENTO_MODEL=tickets:latest make serve

A classification head on the base encoder (default: the embedded all-MiniLM-L6-v2, so it works
offline), trained with a plain PyTorch loop (transformers' Trainer would add ``accelerate`` to the
dependencies for nothing this loop lacks): AdamW, linear warm-up and decay, evaluation after each
epoch, early stopping when macro-F1 has not improved for ``--patience`` epochs, the best epoch
kept. Prints accuracy and macro-F1, overall and per label, against the majority-class baseline;
stores the model like ``import_model`` does (labels, ONNX graphs) with the run's data hash,
options, scores and library versions as metadata. Prints the new tag; bad data gets one line on
stderr and exit status 1, with nothing stored.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, get_linear_schedule_with_warmup

from models.store import load_tokenizer
from train_import.cli import report
from train_import.data import check_labels, read_rows, stratified_split
from train_import.training import (
    FAILURES,
    classification_scores,
    epoch_batches,
    majority_baseline,
    optimizer_step,
    resolve_base,
    seed_everything,
    store_trained,
    training_parser,
)

EVAL_SHARE = 0.2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    held_out = f"a stratified {EVAL_SHARE:.0%} of --data"
    parser = training_parser("train_classifier", __doc__.splitlines()[0], "training data", held_out, {"text": "text", "label": "label"})
    parser.add_argument("--epochs", type=int, default=10, help="at most this many (default 10; early stopping)")
    parser.add_argument("--patience", type=int, default=2, help="epochs without a better macro-F1 before stopping (default 2)")
    parser.add_argument("--batch-size", type=int, default=8)
    return parser.parse_args(argv)


def load(args: argparse.Namespace) -> tuple[list[str], list[str], list[str], list[str], list[str]]:
    """(train texts, train labels, eval texts, eval labels, label set), checked."""
    columns = [args.text_column, args.label_column]
    rows = read_rows(args.data, columns)
    texts, labels = [r[args.text_column] for r in rows], [r[args.label_column] for r in rows]
    if args.eval:
        held = read_rows(args.eval, columns)
        eval_texts, eval_labels = [r[args.text_column] for r in held], [r[args.label_column] for r in held]
        label_set = check_labels(labels, eval_labels, args.data)
        return texts, labels, eval_texts, eval_labels, label_set
    label_set = check_labels(labels, None, args.data)
    train, held_out = stratified_split(labels, EVAL_SHARE, args.seed)
    pick = lambda values, indices: [values[i] for i in indices]
    return pick(texts, train), pick(labels, train), pick(texts, held_out), pick(labels, held_out), label_set


def predict(model, tokenizer, texts: list[str], labels: list[str], args: argparse.Namespace) -> list[str]:
    model.eval()
    predicted = []
    with torch.inference_mode():
        for start in range(0, len(texts), 64):
            batch = tokenizer(texts[start : start + 64], padding=True, truncation=True, max_length=args.max_length, return_tensors="pt")
            predicted += [labels[i] for i in model(**batch).logits.argmax(dim=-1).tolist()]
    return predicted


def fine_tune(args: argparse.Namespace, base_dir: Path, data) -> tuple[object, object, dict]:
    """The best epoch's model, its tokenizer, and the run's history."""
    texts, labels, eval_texts, eval_labels, label_set = data
    seed_everything(args.seed)
    tokenizer = load_tokenizer(base_dir)
    model = AutoModelForSequenceClassification.from_pretrained(
        str(base_dir),
        num_labels=len(label_set),
        id2label=dict(enumerate(label_set)),
        label2id={label: i for i, label in enumerate(label_set)},
    )
    targets = torch.tensor([label_set.index(label) for label in labels])
    steps_per_epoch = -(-len(texts) // args.batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.01)
    schedule = get_linear_schedule_with_warmup(optimizer, int(0.1 * steps_per_epoch * args.epochs), steps_per_epoch * args.epochs)
    best, best_state, history, stale = -1.0, None, [], 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        order = torch.randperm(len(texts)).tolist()
        bar = epoch_batches(len(texts), epoch, args)
        for start in bar:
            indices = order[start : start + args.batch_size]
            batch = tokenizer([texts[i] for i in indices], padding=True, truncation=True, max_length=args.max_length, return_tensors="pt")
            optimizer_step(model(**batch, labels=targets[indices]).loss, optimizer, bar, schedule)
        scores = classification_scores(eval_labels, predict(model, tokenizer, eval_texts, label_set, args), label_set)
        history.append({"epoch": epoch, "accuracy": scores["accuracy"], "macro_f1": scores["macro_f1"]})
        print(f"epoch {epoch}: accuracy {scores['accuracy']:.3f}, macro-F1 {scores['macro_f1']:.3f}", file=sys.stderr, flush=True)
        if scores["macro_f1"] > best:
            best, best_state, stale = scores["macro_f1"], copy.deepcopy(model.state_dict()), 0
        else:
            stale += 1
            if stale >= args.patience:
                print(f"stopping early: no better macro-F1 for {stale} epochs", file=sys.stderr)
                break
    model.load_state_dict(best_state)
    return model, tokenizer, {"epochs": history}


def print_scores(title: str, scores: dict) -> None:
    print(f"{title}: accuracy {scores['accuracy']:.3f}, macro-F1 {scores['macro_f1']:.3f}", file=sys.stderr)
    for label, s in scores["per_label"].items():
        print(
            f"    {label:<24} precision {s['precision']:.3f}  recall {s['recall']:.3f}  F1 {s['f1']:.3f}  ({s['support']})", file=sys.stderr
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def run():
        data = load(args)
        texts, labels, eval_texts, eval_labels, label_set = data
        base_dir, base = resolve_base(args.base)
        started = time.monotonic()
        model, tokenizer, history = fine_tune(args, base_dir, data)
        baseline = majority_baseline(labels, eval_labels, label_set)
        final = classification_scores(eval_labels, predict(model, tokenizer, eval_texts, label_set, args), label_set)
        print_scores("majority-class baseline", baseline)
        print_scores("fine-tuned", final)

        def save(directory: str) -> None:
            model.save_pretrained(directory)
            tokenizer.save_pretrained(directory)

        return store_trained(
            save, args, kind="classifier", task="classify", base=base, started=started,
            train_examples=len(texts), eval_examples=len(eval_texts), baseline=baseline, scores=final, **history,
        )  # fmt: skip

    return report("training", run, FAILURES)


if __name__ == "__main__":
    sys.exit(main())
