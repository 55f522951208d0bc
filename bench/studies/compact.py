"""Compact embeddings against float: how much of the float neighbours each compact type keeps.

    python -m bench.studies.compact [TAG]   # an imported embedder (default text-model:latest) → bench/results/compact.json

A corpus of 2,000 varied texts in pairs (a text and a light edit of it, ``tests/test_onnx.py``),
embedded by the stored model (``onnx-int8``, the CPU default), each text a query against all the
others. Each type is searched as a vector database stores it: int8 and uint8 (on the model's ranges
from import, ``models.calibration``) read back with those ranges, by cosine; binary and ubinary by
Hamming distance. Figures: top-1 agreement with float, recall@10 of float's top 10.
"""

from __future__ import annotations

import sys

import bentoml
import numpy as np

from bench import write_result
from models.backends import load_backend
from models.calibration import load_ranges, quantized
from models.inference import run_batch
from models.postprocess import packed_bits
from models.spec import ModelSpec
from models.tokenization import TextTokenizer

TEXTS, K = 2000, 10


def similarities(vectors: np.ndarray, kind: str, ranges: np.ndarray) -> np.ndarray:
    """Every text against every other, higher is closer, as a search over ``kind`` ranks them."""
    if kind == "float":
        rows = vectors
    elif kind in ("int8", "uint8"):  # read back with the ranges, as a scalar-quantizing store does
        levels = quantized(vectors, kind, ranges).astype(np.float32) + (128 if kind == "int8" else 0)
        rows = ranges[0] + (levels + 0.5) * (ranges[1] - ranges[0]) / 255
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    else:
        bits = np.unpackbits(packed_bits(vectors, signed=False), axis=1).astype(np.float32)
        rows = 2 * bits - 1  # ±1 per dimension: a dot product is the dimensions minus twice the Hamming distance
    scores = rows @ rows.T
    np.fill_diagonal(scores, -np.inf)
    return scores


def main(tag: str) -> None:
    model = bentoml.models.get(tag)
    spec, ranges = ModelSpec.of(model), load_ranges(model.path)
    if ranges is None:
        sys.exit(f"{tag} has no calibration ranges: import it again")
    from tests.test_onnx import varied_sentences  # the gates' corpus generator

    texts = varied_sentences(TEXTS, seed=5)
    ids = [encoded.ids for encoded in TextTokenizer(model.path, spec.max_length).encode(texts)]
    vectors = np.stack(run_batch(load_backend("onnx-int8", model.path, spec, 2), ids, spec.pad_id, 4096))
    reference = np.argsort(-similarities(vectors, "float", ranges), axis=1)[:, :K]
    report = {}
    for kind in ("int8", "uint8", "binary", "ubinary"):
        ranked = np.argsort(-similarities(vectors, kind, ranges), axis=1)[:, :K]
        recall = np.mean([len(set(a) & set(b)) / K for a, b in zip(ranked, reference)])
        outside = float(((vectors < ranges[0]) | (vectors > ranges[1])).mean()) if kind in ("int8", "uint8") else None
        report[kind] = {
            "top1_agreement": round(float(np.mean(ranked[:, 0] == reference[:, 0])), 4),
            f"recall_at_{K}": round(float(recall), 4),
            "bytes_per_vector": int(vectors.shape[1] if kind in ("int8", "uint8") else vectors.shape[1] // 8),
            **({"values_outside_ranges": round(outside, 5)} if outside is not None else {}),
        }
        print(kind, report[kind])
    write_result("compact.json", {"model": tag, "texts": TEXTS, "float_bytes_per_vector": 4 * vectors.shape[1], "types": report})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "text-model:latest")
