"""Multi-vector (ColBERT) models: the served graphs against PyLate, and per-token int8 against fp32.

    python -m bench.studies.multivector_int8 [--queries 100] [--documents 300] [--rounds 3] [--shapes test minilm bert-base]
    → bench/results/multivector-int8.json

Per shape, a PyLate ColBERT (Dense projection without bias, PyLate's defaults: query length 32 with
[MASK] expansion, document length 180, punctuation skiplist) built and saved by PyLate 1.6 on its own
stack (``harness.pylate_reference``), imported through the store:

- against PyLate (the self-check's 32 probe texts as queries and as documents): the largest difference
  of a token vector and of a MaxSim score, on torch and on the fp32 ONNX graph, and whether every
  query ranks the documents in PyLate's order;
- int8 against fp32 ONNX: the self-check's figures (token cosines, the largest MaxSim change per query
  token), and over ``--queries`` short texts as queries and ``--documents`` as documents, the fp32
  MaxSim top 10 of each query found in int8's top 10 (recall@10) and the same best document (top-1);
- speed: documents/s of both graphs in length-sorted batches of 32, alternated, best of ``--rounds``;
- what ``auto`` serves.

Shapes: ``test`` is the tests' encoder (``harness.testmodels``: 32 wide, 2 layers, random) projected to
16; ``minilm`` is all-MiniLM-L6-v2's trained encoder (384 wide, 6 layers) with a random projection to
128 (answerai-colbert-small's shape); ``bert-base`` is BERT-base's shape (768 wide, 12 layers,
ColBERTv2's), random, projected to 128. Random weights give the cost and only a hint of a trained
ColBERT's accuracy. The models live in a temporary store, removed after.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.studies import alternated_rates, each_shape

SHAPES = {"test": 16, "minilm": 128, "bert-base": 128}  # the Dense projection's width


def encoder(shape: str, root: Path) -> Path:
    """The encoder the ColBERT of ``shape`` is made of, saved with its tokenizer under ``root``."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from harness.testmodels import build_tiny_bert
    from models.store import default_model_dir

    directory = root / f"{shape}-encoder"
    if shape == "test":
        return build_tiny_bert(directory)
    torch.manual_seed(0)
    model = BertModel.from_pretrained(str(default_model_dir())) if shape == "minilm" else BertModel(BertConfig())
    model.eval().save_pretrained(directory)
    AutoTokenizer.from_pretrained(str(default_model_dir())).save_pretrained(directory)
    return directory


def vectors(backend, stored, spec, texts: list[str], side: str) -> list[np.ndarray]:
    from models.inference import run_batch
    from models.postprocess import token_vectors
    from models.tokenization import SideTokenizer

    encoded = SideTokenizer(stored.path, spec, side).encode(texts)
    rows = run_batch(backend, [e.ids for e in encoded], spec.pad_id, 2048)
    return [token_vectors(row, e.ids, spec.skiplist if side == "document" else ()) for row, e in zip(rows, encoded)]


def scores(queries: list[np.ndarray], documents: list[np.ndarray]) -> np.ndarray:
    from models.postprocess import maxsim

    return np.array([[maxsim(query, document) for document in documents] for query in queries])


def against_pylate(backend, stored, spec, reference: dict, texts: list[str]) -> dict:
    queries, documents = vectors(backend, stored, spec, texts, "query"), vectors(backend, stored, spec, texts, "document")
    ours = scores(queries, documents)
    vector_diff = max(float(np.abs(a - b).max()) for a, b in zip(queries + documents, reference["queries"] + reference["documents"]))
    order = (np.argsort(-ours, axis=1, kind="stable") == np.argsort(-reference["scores"], axis=1, kind="stable")).all()
    return {
        "max_abs_vector_diff": float(f"{vector_diff:.3g}"),
        "max_abs_score_diff": float(f"{np.abs(ours - reference['scores']).max():.3g}"),
        "same_order_every_query": bool(order),
    }


def measure(shape: str, root: Path, queries: list[str], documents: list[str], rounds: int) -> dict:
    import bentoml

    from harness.pylate_reference import build_colbert
    from models.backends import load_backend, self_checked
    from models.backends.onnx_backend import OnnxBackend
    from models.selfcheck import PROBE_TEXTS
    from models.spec import ModelSpec
    from models.store import import_model
    from models.tokenization import SideTokenizer
    from serving.settings import settings

    probe = list(PROBE_TEXTS)
    reference = build_colbert(root / shape, encoder(shape, root), SHAPES[shape], texts=(probe, probe))
    started = time.perf_counter()
    stored = bentoml.models.get(import_model(root / shape, name=f"colbert-{shape}"))
    report = {"import_s": round(time.perf_counter() - started, 1)}
    spec = ModelSpec.of(stored)
    threads = settings.runner_threads
    graphs = {graph: OnnxBackend(stored.path, spec, threads, cpu_graph=graph, cuda=False) for graph in ("fp32", "int8")}
    report["against_pylate"] = {
        "torch": against_pylate(load_backend("torch", stored.path, spec, threads), stored, spec, reference, probe),
        "onnx fp32": against_pylate(graphs["fp32"], stored, spec, reference, probe),
    }
    _, (int8, *_), _ = self_checked(stored.path, spec, threads)
    report["self_check"] = {"precision": int8.precision, **int8.fidelity.as_dict()}
    found = {
        graph: scores(vectors(b, stored, spec, queries, "query"), vectors(b, stored, spec, documents, "document"))
        for graph, b in graphs.items()
    }
    top = {graph: np.argsort(-matrix, axis=1, kind="stable")[:, :10] for graph, matrix in found.items()}
    recall = [len(set(a) & set(b)) / 10 for a, b in zip(top["int8"], top["fp32"])]
    per_token = np.abs(found["int8"] - found["fp32"]).max(axis=1) / spec.query_length
    report["retrieval"] = {
        "queries": len(queries),
        "documents": len(documents),
        "recall_at_10_min": min(recall),
        "recall_at_10_mean": round(float(np.mean(recall)), 4),
        "top1_same": round(float((top["int8"][:, 0] == top["fp32"][:, 0]).mean()), 4),
        "max_maxsim_error_per_query_token": float(f"{per_token.max():.3g}"),
    }
    auto = load_backend("auto", stored.path, spec, threads)
    report["auto"] = f"{auto.name} {auto.precision}"
    ids = [e.ids for e in SideTokenizer(stored.path, spec, "document").encode(documents)]
    best = alternated_rates(graphs, ids, spec.pad_id, settings.token_budget, rounds)
    report["documents_per_s"] = {graph: round(rate, 1) for graph, rate in best.items()}
    report["int8_over_fp32"] = round(best["int8"] / best["fp32"], 2)
    report["tokens_per_document"] = round(sum(len(i) for i in ids) / len(ids), 1)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--documents", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    args = parser.parse_args()
    from harness.texts import short_texts

    queries, documents = short_texts(args.queries, seed=3), short_texts(args.documents)
    shapes, load = each_shape("multivector-int8-", args.shapes, lambda shape, root: measure(shape, root, queries, documents, args.rounds))
    from bench import write_result
    from serving.settings import settings

    report = {
        "what": "PyLate ColBERT models (random projection): served graphs against pylate 1.6, per-token int8 against fp32 ONNX on this CPU",
        "rounds": args.rounds,
        "runner_threads": settings.runner_threads,
        "token_budget": settings.token_budget,
        "load_average_before_after": load,  # 2 cores shared with other work
        "shapes": shapes,
    }
    print(write_result("multivector-int8.json", report))


if __name__ == "__main__":
    main()
