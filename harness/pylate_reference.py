"""PyLate 1.6, the library users know for multi-vector (ColBERT) models, as the reference they are held to.

PyLate 1.6 needs sentence-transformers 5.3 (it fails on 6.x, which the project runs), so it lives in a
directory of its own, ``<venv>/pylate`` (``requirements-pylate.txt``, installed by ``make venv``), and
runs in a subprocess with that directory first on ``PYTHONPATH``: this file is also that subprocess's
script (``python harness/pylate_reference.py build``), which imports nothing of the project.

``build_colbert`` (``build_colberts``: several in one subprocess, PyLate's stack takes seconds to
import) saves a PyLate ColBERT on a (random-weight) encoder with PyLate itself, and, given texts,
returns what the saved model, loaded as users load it, gives for them: the token vectors of the
queries and the documents, and each query's MaxSim score with each document
(``pylate.scores.colbert_scores``, one pair at a time: no padding in the way).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PYLATE = Path(sys.prefix) / "pylate"


def run(*args: str, stdin: str = "") -> str:
    """This script with ``args`` under PyLate's stack; its stdout."""
    env = {**os.environ, "PYTHONPATH": str(PYLATE), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if not (PYLATE / "pylate").is_dir():
        raise RuntimeError(f"PyLate is not installed in {PYLATE}: make venv (requirements-pylate.txt)")
    result = subprocess.run([sys.executable, __file__, *args], input=stdin, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"PyLate reference failed: {result.stderr[-3000:]}")
    return result.stdout


def build_colbert(
    directory: Path, encoder_dir: Path, dimensions: int = 16, texts: tuple[list[str], list[str]] | None = None, **settings
) -> dict | None:
    """A PyLate ColBERT of the encoder in ``encoder_dir`` and a Dense projection to ``dimensions`` (no bias,
    drawn from seed 0), with PyLate's ``settings`` (``query_length``, ``document_length``, ...), saved in
    ``directory``; with ``texts`` (queries, documents), what PyLate's ``encode`` gives for them."""
    return build_colberts(encoder_dir, {directory: settings}, dimensions, texts)[directory]


def build_colberts(
    encoder_dir: Path, variants: dict[Path, dict], dimensions: int = 16, texts: tuple[list[str], list[str]] | None = None
) -> dict[Path, dict | None]:
    """``build_colbert`` for each directory and its settings, in one subprocess; what PyLate gives for ``texts`` by directory."""
    jobs = [(str(directory), settings, str(directory.parent / f"{directory.name}-pylate.npz")) for directory, settings in variants.items()]
    run("build", str(encoder_dir), str(dimensions), stdin=json.dumps({"jobs": jobs, "texts": texts}))
    return {directory: read(Path(output), *texts) if texts else None for directory, (_, _, output) in zip(variants, jobs)}


def read(output: Path, queries: list[str], documents: list[str]) -> dict:
    import numpy as np

    with np.load(output) as arrays:
        return {
            "queries": [arrays[f"q{i}"] for i in range(len(queries))],
            "documents": [arrays[f"d{i}"] for i in range(len(documents))],
            "scores": arrays["scores"],
        }


def _build(encoder_dir: str, dimensions: str) -> None:
    import torch
    from pylate import models
    from sentence_transformers.models import Transformer

    given = json.loads(sys.stdin.read())
    for directory, settings, output in given["jobs"]:
        torch.manual_seed(0)
        encoder = Transformer(encoder_dir)
        dense = models.Dense(encoder.get_word_embedding_dimension(), int(dimensions), bias=False)
        models.ColBERT(modules=[encoder, dense], device="cpu", **settings).save(directory)
        if given["texts"]:
            _encode(directory, output, *given["texts"])


def _encode(model_dir: str, output: str, queries: list[str], documents: list[str]) -> None:
    """What ``models.ColBERT(model_dir)``, loaded as users load it, gives for the texts."""
    import numpy as np
    from pylate import models, scores

    model = models.ColBERT(model_dir, device="cpu")
    queries = model.encode(queries, is_query=True, batch_size=8)
    documents = model.encode(documents, is_query=False, batch_size=8)
    matrix = [[float(scores.colbert_scores(query[None], document[None])[0, 0]) for document in documents] for query in queries]
    arrays = {**{f"q{i}": v for i, v in enumerate(queries)}, **{f"d{i}": v for i, v in enumerate(documents)}}
    np.savez(output, scores=np.array(matrix, dtype=np.float32), **arrays)


if __name__ == "__main__":
    {"build": _build}[sys.argv[1]](*sys.argv[2:])
