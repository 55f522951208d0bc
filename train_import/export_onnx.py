"""Add ONNX graphs (fp32, int8, fp16) to a model already in the BentoML store.

    python -m train_import.export_onnx text-model:latest

Saves a new version of the model with the graphs added and prints its tag: stored models are
never changed in place (``models.store`` says why), and ``name:latest`` now resolves to the new
version. ``python -m train_import.import_model`` writes them at import time already (unless
``--no-onnx``); this is for models stored without them.
One line on stderr and exit status 1 on failure.
"""

from __future__ import annotations

import argparse
import sys

import bentoml

from models.store import add_onnx
from train_import.cli import report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train_import.export_onnx", description=__doc__.splitlines()[0])
    parser.add_argument("tag", help="store tag of the model, e.g. text-model:latest")
    args = parser.parse_args(argv)
    return report("export", lambda: add_onnx(args.tag), (bentoml.exceptions.NotFound, OSError, ValueError))


if __name__ == "__main__":
    sys.exit(main())
