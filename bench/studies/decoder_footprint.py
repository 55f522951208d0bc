"""What a decoder embedder costs to serve: peak memory and sentences/s per backend, tiny and Qwen3-0.6B-shaped.

    python -m bench.studies.decoder_footprint [--texts 256] [--rounds 2]   → bench/results/decoder-footprint.json

Two random-weight Qwen3 embedders built offline (``harness.testmodels``), with the files
sentence-transformers reads for Qwen3-Embedding (last-token pooling of the appended EOS, Normalize,
``max_seq_length`` 512): a tiny one (hidden 64, 2 layers) and one of Qwen3-0.6B's shape (hidden
1,024, 28 layers, 16 query and 8 key/value heads of 128, FFN 3,072, 151,669 embeddings: ~0.6B
parameters, 2.4 GB in fp32). The tokenizer is a byte-level BPE trained on the benchmark's own words,
so a short text is about as many tokens as Qwen's tokenizer makes of plain English; the tokens per
text are recorded. Each model is imported with its ONNX graphs (the import's time and peak RSS are
recorded too); then each backend runs in a process of its own, so that its peak RSS is its own:
load, one warm-up run, then short texts (5-30 words) in runs of 64 through ``run_batch`` under the
serving token budget, best of ``--rounds``.

Every run imports both anew, as ``bench-decoder-<size>`` in the store (about 7 GB for the 0.6B shape:
weights 2.4, fp32 graph 2.4, int8 1.0, fp16 1.2; ``bentoml models delete`` frees it).

Random weights give the real model's cost, not its int8 accuracy: real decoders carry a few huge
activations that per-token int8 may not survive, which is what the start-up self-check of ``auto``
is for (``models.selfcheck``); its result on these weights is recorded, and says little.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bentoml

from bench import write_result
from harness.texts import short_texts

SHAPES = {
    "tiny": {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
    },
    "qwen3-0.6b": {
        "hidden_size": 1024,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 3072,
        "vocab_size": 151669,
        "max_position_embeddings": 40960,
        "rope_theta": 1_000_000,
    },
}
BACKENDS = ("torch", "onnx", "onnx-int8", "auto")
MAX_SEQ_LENGTH = 512


def peak_rss_mib() -> float:
    """This process's peak resident memory so far (``ru_maxrss`` is in KiB on Linux)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def mib(path: Path) -> float:
    """A file's size, or everything under a directory."""
    files = path.rglob("*") if path.is_dir() else [path]
    return round(sum(file.stat().st_size for file in files if file.is_file()) / 2**20, 1)


def as_qwen3_embedding(directory: Path, hidden_size: int) -> None:
    """The sentence-transformers files of a Qwen3-Embedding-like pipeline, written beside the model."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False}))
    for module in modules[1:]:
        (directory / module["path"]).mkdir(exist_ok=True)
    pooling = {"word_embedding_dimension": hidden_size, "pooling_mode_lasttoken": True, "include_prompt": True}
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (directory / "2_Normalize" / "config.json").write_text("{}")


def import_shape(size: str) -> dict:
    """Builds and imports the ``size`` model (in a process of its own: its peak RSS is the import's)."""
    from transformers import AutoTokenizer, Qwen3Config

    from harness.testmodels import build_decoder, build_decoder_tokenizer
    from models.store import import_model

    root = Path(tempfile.mkdtemp(prefix=f"decoder-{size}-"))
    tokenizer_dir = build_decoder_tokenizer(root / "tokenizer", short_texts(4096, seed=1), vocab_size=4096)
    shape = {"vocab_size": len(AutoTokenizer.from_pretrained(str(tokenizer_dir))), **SHAPES[size]}
    model_dir = build_decoder(root / "model", tokenizer_dir, Qwen3Config(**shape))
    as_qwen3_embedding(model_dir, shape["hidden_size"])
    started = time.perf_counter()
    tag = import_model(model_dir, name=f"bench-decoder-{size}", source=f"random Qwen3, {size} shape")
    import_s = time.perf_counter() - started
    shutil.rmtree(root)  # 2.4 GB of built weights for the 0.6B shape; the store has its own copy
    stored = bentoml.models.get(tag)
    return {
        "tag": str(tag),
        "import_s": round(import_s, 1),
        "import_peak_rss_mib": peak_rss_mib(),
        "stored_mib": mib(Path(stored.path)),
        "onnx_mib": mib(Path(stored.path) / "onnx"),
        # A graph past protobuf's 2 GiB keeps its weights in a side file (``models.onnx_layout``): which ones did.
        "onnx_files_mib": {file.name: mib(file) for file in sorted((Path(stored.path) / "onnx").glob("*"))},
        "onnx": stored.info.metadata.get("onnx"),
        "onnx_error": stored.info.metadata.get("onnx_error"),
    }


def measure(tag: str, backend_name: str, texts: int, rounds: int) -> dict:
    """One backend of the stored model ``tag``: load, warm up, best of ``rounds`` over ``texts`` short texts."""
    import numpy as np

    from models.backends import load_backend
    from models.inference import run_batch
    from models.spec import ModelSpec
    from models.tokenization import TextTokenizer
    from serving.settings import settings

    stored = bentoml.models.get(tag)
    spec = ModelSpec.of(stored)
    ids = [e.ids for e in TextTokenizer(stored.path, spec.max_length).encode(short_texts(texts))]
    started = time.perf_counter()
    backend = load_backend(backend_name, stored.path, spec, settings.runner_threads)
    load_s = time.perf_counter() - started
    loaded_mib = peak_rss_mib()
    run_batch(backend, ids[:64], spec.pad_id, settings.token_budget)
    best = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        for start in range(0, len(ids), 64):
            run_batch(backend, ids[start : start + 64], spec.pad_id, settings.token_budget)
        best = max(best, len(ids) / (time.perf_counter() - started))
    return {
        "backend": backend_name,
        "served": f"{backend.name} {backend.precision}",
        "fidelity": backend.fidelity.as_dict() if backend.fidelity else None,
        "sentences_per_s": round(best, 2),
        "load_s": round(load_s, 1),
        "peak_rss_after_load_mib": loaded_mib,
        "peak_rss_mib": peak_rss_mib(),
        "tokens_per_text": round(float(np.mean([len(row) for row in ids])), 1),
    }


def child(*args: str) -> dict:
    """This module's ``args`` mode in a fresh process; its one JSON line (its progress goes to stderr as it comes)."""
    result = subprocess.run([sys.executable, "-m", "bench.studies.decoder_footprint", *args], check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(result.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.decoder_footprint", description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=256, help="short texts per round (default 256)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per backend, the best kept (default 2)")
    parser.add_argument("--sizes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    args = parser.parse_args()
    from serving.settings import settings

    report = {
        "what": "random-weight Qwen3 embedders (last token, Normalize), short texts of 5-30 words in runs of 64",
        "texts": args.texts,
        "rounds": args.rounds,
        "runner_threads": settings.runner_threads,
        "token_budget": settings.token_budget,
        "models": {},
    }
    for size in args.sizes.split(","):
        imported = child("--import", size)
        print(size, json.dumps(imported), flush=True)
        backends = BACKENDS if imported["onnx"] else ("torch",)
        rows = []
        for backend in backends:
            rows.append(child("--measure", imported["tag"], backend, str(args.texts), str(args.rounds)))
            print(size, json.dumps(rows[-1]), flush=True)
        report["models"][size] = {"shape": SHAPES[size], **imported, "backends": rows}
    print(write_result("decoder-footprint.json", report))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--import"]:
        print(json.dumps(import_shape(sys.argv[2])))
    elif sys.argv[1:2] == ["--measure"]:
        print(json.dumps(measure(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))))
    else:
        main()
