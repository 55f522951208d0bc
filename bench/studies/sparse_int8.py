"""Per-token int8 against fp32 for SPLADE: what a cosine misses, and what int8 buys.

    python -m bench.studies.sparse_int8 [--texts 300] [--rounds 3] [--shapes test minilm bert-base]
    → bench/results/sparse-int8.json

A cosine near 1 can hide weights that int8 turns from zero to non-zero or back, which changes what
an inverted index stores. Per text, int8 against fp32: cosine, the count of such flips, the flipped
entries' share of the text's L1 mass (fp32), top-32 index overlap; over the self-check's probe texts
and over ``--texts`` short ordinary texts. Speed: sentences/s of both graphs in length-sorted
batches of 32 under the serving token budget, alternated in one run, best of ``--rounds``.

Shapes (SPLADE built offline, max pooling, relu, the 30,522-id vocabulary: the vocab-sized head is
real): ``test`` is the tests' model (``harness.testmodels``: 32 wide, 2 layers, random); ``minilm`` is
all-MiniLM-L6-v2's trained encoder with its tied embeddings as the MLM decoder (384 wide, 6 layers;
random transform head: the shape of small SPLADEs); ``bert-base`` is BERT-base's shape (768 wide,
12 layers: most SPLADE models), random. These make nearly every id non-zero; ``-sparse`` shifts the
head's bias so that ~1% are (``sparsify``), as in a trained SPLADE. What ``auto`` serves is recorded
too. Random weights give the real cost, and only a hint of real accuracy. The models live in a temporary store, removed after.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.studies import alternated_rates, each_shape

TOP_K = 32
SPARSITY = 0.01


def build(shape: str, root: Path) -> Path:
    """A saved SPLADE ``SparseEncoder`` of ``shape`` under ``root``; its directory."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from harness.testmodels import build_splade, build_tiny_bert
    from models.store import default_model_dir

    mlm = root / f"{shape}-mlm"
    if shape == "test":
        build_tiny_bert(mlm, BertForMaskedLM)
    else:
        torch.manual_seed(0)
        minilm = shape.startswith("minilm")
        model = (BertForMaskedLM.from_pretrained(str(default_model_dir())) if minilm else BertForMaskedLM(BertConfig())).eval()
        tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir()))
        if shape.endswith("-sparse"):
            sparsify(model, tokenizer)
        model.save_pretrained(mlm)
        tokenizer.save_pretrained(mlm)
    build_splade(root / shape, mlm)
    return root / shape


def sparsify(model, tokenizer, share: float = SPARSITY) -> None:
    """Shifts the MLM head's bias so that about ``share`` of the ids are non-zero per text after max
    pooling: random weights would make nearly all 30,522 non-zero, a trained SPLADE makes ~100-300."""
    import torch

    from harness.texts import short_texts

    batch = tokenizer(short_texts(64, seed=2), padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits.masked_fill(~batch["attention_mask"].bool()[..., None], -torch.inf)
        model.cls.predictions.bias -= torch.quantile(logits.max(dim=1).values.flatten(), 1 - share)


def per_text(candidate: np.ndarray, reference: np.ndarray, spec) -> dict[str, np.ndarray]:
    """int8 rows against fp32 rows (``[texts, vocabulary]``), one figure per text."""
    from models.selfcheck import agreement, flipped_mass

    k = np.minimum(TOP_K, (reference > 0).sum(axis=1))
    overlap = [len(set(np.argsort(-c)[:n]) & set(np.argsort(-r)[:n])) / max(n, 1) for c, r, n in zip(candidate, reference, k)]
    return {
        "cosine": agreement(candidate, reference, spec),
        "flips": ((candidate > 0) != (reference > 0)).sum(axis=1),
        "flipped_l1_share": flipped_mass(candidate, reference),
        "top32_overlap": np.array(overlap),
        "nonzero_fp32": (reference > 0).sum(axis=1),
    }


def summary(figures: dict[str, np.ndarray], texts: list[str]) -> dict:
    worst = int(figures["flipped_l1_share"].argmax())
    return {
        "texts": len(texts),
        "cosine_min": round(float(figures["cosine"].min()), 6),
        "cosine_mean": round(float(figures["cosine"].mean()), 6),
        "flips_total": int(figures["flips"].sum()),
        "nonzero_fp32_total": int(figures["nonzero_fp32"].sum()),
        "flips_per_text_max": int(figures["flips"].max()),
        "texts_with_flips": int((figures["flips"] > 0).sum()),
        "flipped_l1_share_max": float(f"{figures['flipped_l1_share'].max():.3g}"),
        "flipped_l1_share_mean": float(f"{figures['flipped_l1_share'].mean():.3g}"),
        "flipped_l1_share_worst_text": texts[worst],
        "top32_overlap_min": round(float(figures["top32_overlap"].min()), 4),
        "top32_overlap_mean": round(float(figures["top32_overlap"].mean()), 4),
    }


def measure(shape: str, root: Path, texts: list[str], rounds: int) -> dict:
    import bentoml

    from models.backends import load_backend
    from models.backends.onnx_backend import OnnxBackend
    from models.inference import run_batch
    from models.selfcheck import PROBE_TEXTS
    from models.spec import ModelSpec
    from models.store import import_model
    from models.tokenization import TextTokenizer
    from serving.settings import settings

    started = time.perf_counter()
    stored = bentoml.models.get(import_model(build(shape, root), name=f"sparse-{shape}"))
    import_s = time.perf_counter() - started
    spec = ModelSpec.of(stored)
    backends = {graph: OnnxBackend(stored.path, spec, settings.runner_threads, cpu_graph=graph, cuda=False) for graph in ("fp32", "int8")}
    tokenizer = TextTokenizer(stored.path, spec.max_length)
    report = {"import_s": round(import_s, 1), "int8_precision": backends["int8"].precision}
    for name, batch in (("probe", list(PROBE_TEXTS)), ("ordinary", texts)):
        ids = [e.ids for e in tokenizer.encode(batch)]
        rows = [np.stack(run_batch(backends[graph], ids, spec.pad_id, settings.token_budget)) for graph in ("int8", "fp32")]
        report[name] = summary(per_text(*rows, spec), batch)
    auto = load_backend("auto", stored.path, spec, settings.runner_threads)
    report["auto"] = {"served": f"{auto.name} {auto.precision}", "fidelity": auto.fidelity.as_dict()}
    ids = [e.ids for e in tokenizer.encode(texts)]
    best = alternated_rates(backends, ids, spec.pad_id, settings.token_budget, rounds)
    report["sentences_per_s"] = {graph: round(rate, 1) for graph, rate in best.items()}
    report["int8_over_fp32"] = round(best["int8"] / best["fp32"], 2)
    report["tokens_per_text"] = round(sum(len(i) for i in ids) / len(ids), 1)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", nargs="+", default=["test", "minilm", "minilm-sparse", "bert-base-sparse"])
    args = parser.parse_args()
    from harness.texts import short_texts

    shapes, load = each_shape("sparse-int8-", args.shapes, lambda shape, root: measure(shape, root, short_texts(args.texts), args.rounds))
    from bench import write_result
    from serving.settings import settings

    report = {
        "what": "random-weight SPLADE (max, relu), per-token int8 vs fp32 ONNX on this CPU, per text",
        "texts": args.texts,
        "rounds": args.rounds,
        "runner_threads": settings.runner_threads,
        "token_budget": settings.token_budget,
        "load_average_before_after": load,  # 2 cores shared with other work
        "shapes": shapes,
    }
    print(write_result("sparse-int8.json", report))


if __name__ == "__main__":
    main()
