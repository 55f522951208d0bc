"""Import a Hugging Face text model into the BentoML model store.

    python -m train_import.import_model                                   # embedded all-MiniLM-L6-v2
    python -m train_import.import_model --model-id distilbert/distilbert-base-uncased-finetuned-sst-2-english
    python -m train_import.import_model --path ./my-model --name my-model --task embed
    python -m train_import.import_model --no-onnx                         # without ONNX graphs (torch only)
    python -m train_import.import_model --model-id Qwen/Qwen3-Embedding-0.6B --name qwen3 --max-length 512

Prints the new tag on success; one line on stderr and exit status 1 on failure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import bentoml

from models.detection import UnsupportedModel
from models.spec import TASKS
from models.store import DEFAULT_NAME, default_model_dir, download, import_model
from train_import.cli import report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m train_import.import_model", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model-id", help="Hugging Face Hub id, e.g. sentence-transformers/all-MiniLM-L6-v2")
    source.add_argument("--path", type=Path, help="local save_pretrained directory")
    parser.add_argument("--revision", help="Hub branch, tag or commit (with --model-id)")
    parser.add_argument("--name", default=DEFAULT_NAME, help=f"store name (default {DEFAULT_NAME})")
    parser.add_argument("--task", choices=("auto", *TASKS), default="auto")
    parser.add_argument(
        "--onnx",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="save ONNX graphs (fp32, int8, fp16) for the onnx backends the service picks by default (default: yes)",
    )
    parser.add_argument(
        "--max-length",
        type=int,
        help="most tokens per text, longer texts are cut (default: sentence-transformers' max_seq_length, else the "
        "position table, within what one pass of a text that long holds in 2 GiB: 2,560 for Qwen3-0.6B of its 32,768; "
        "up to the model's limit, docs/models.md)",
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="a model whose architecture is Python code beside its weights (auto_map: nomic-embed, jina-embeddings, gte): "
        "run that code here, once, to export its ONNX graphs; the server serves the graphs and never runs it",
    )
    parser.add_argument(
        "--calibration",
        type=Path,
        help="a text file, one text per line, over which an embedder's int8/uint8 ranges are measured "
        "(default: a built-in set drawn from the model's vocabulary); texts like your corpus fit the ranges to it",
    )
    args = parser.parse_args(argv)
    if args.revision and not args.model_id:
        parser.error("--revision needs --model-id")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def run() -> bentoml.Tag:
        if args.model_id:
            model_dir, source = download(args.model_id, args.revision, code=args.trust_remote_code), args.model_id
        else:
            model_dir = args.path or default_model_dir()
            source = str(args.path) if args.path else "sentence-transformers/all-MiniLM-L6-v2"
        calibration = [line for line in args.calibration.read_text().splitlines() if line.strip()] if args.calibration else None
        return import_model(
            model_dir,
            name=args.name,
            task=args.task,
            source=source,
            revision=args.revision,
            onnx=args.onnx,
            max_length=args.max_length,
            calibration=calibration,
            trust_remote_code=args.trust_remote_code,
        )

    return report("import", run, (UnsupportedModel, OSError, ValueError))


if __name__ == "__main__":
    sys.exit(main())
