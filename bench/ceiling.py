"""The in-process ceiling: sentences/s of a graph without HTTP or the batcher, per way of batching (``MODES``).

``make bench`` (``bench.run``) records it beside the served figures, the GPU run (``bench.gpu``) per batch
size, and ``make cpu-classes`` per int8 recipe; ``fidelity`` is each graph's accuracy on the gate texts of
``tests/test_onnx.py``. The ways of batching the same stream of short texts (5-30 words), pre-tokenized:

- ``alone``: every text its own forward pass, unpadded;
- ``arrival-32``/``arrival-64``: consecutive runs of 32 or 64 texts, each padded to its longest;
- ``sorted-32``/``sorted-64``: the whole stream sorted by length, then cut: the least padding any batcher
  could reach, and so the ceiling the served figures are compared with;
- ``served-64``: runs of 64 in arrival order through ``run_batch``, what the Encoder does with a full batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import bentoml
import numpy as np

from harness.texts import short_texts
from models.backends import Backend, load_backend
from models.batching import pad
from models.inference import run_batch
from models.spec import ModelSpec
from models.tokenization import TextTokenizer
from serving.settings import settings

BENCH_MODEL = "bench-minilm-onnx"
MODES = ("alone", "arrival-32", "arrival-64", "sorted-32", "sorted-64", "served-64")
STREAM = 1024  # texts per measured pass


def ceiling(
    backend_name: str, tag: str, batch_sizes: Sequence[int], seconds: float = 3.0, sort: bool = False, token_budget: int | None = None
) -> tuple[str, str, list[dict]]:
    """The backend ``auto`` resolved to, its device, and ``{"batch_size", "sentences_per_s"}`` per batch size, ``seconds`` each.

    Tokenization included, each batch through ``run_batch`` as the Encoder runs it (cut into passes
    of ``token_budget`` padded tokens, the served one by default); ``sort``: consecutive batches of
    the stream sorted by length (the least padding), else in arrival order. Loads and runs the
    backend on the calling thread: torch's OpenMP pool belongs to the thread that loaded the
    model (docs/design.md, section 2).
    """
    stored = bentoml.models.get(tag)
    spec = ModelSpec.of(stored)
    tokenizer = TextTokenizer(stored.path, spec.max_length)
    backend = load_backend(backend_name, stored.path, spec, settings.runner_threads)
    texts = short_texts(4096)
    if sort:
        lengths = {text: len(e.ids) for text, e in zip(texts, tokenizer.encode(texts), strict=True)}
        texts.sort(key=lengths.__getitem__)

    def encode(start: int, size: int) -> None:
        chunk = [texts[(start + i) % len(texts)] for i in range(size)]
        run_batch(backend, [e.ids for e in tokenizer.encode(chunk)], spec.pad_id, token_budget or settings.token_budget)

    rows = []
    for size in batch_sizes:
        encode(0, size)  # warm-up: the first pass at a new size allocates
        done, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            encode(done, size)
            done += size
        rows.append({"batch_size": size, "sentences_per_s": round(done / elapsed, 1)})
    return backend.name, backend.device, rows


def batches(ids: list[np.ndarray], mode: str) -> list[list[np.ndarray]]:
    """The stream cut into the forward passes of ``mode`` (``served-64``: runs for ``run_batch``)."""
    if mode == "alone":
        return [[one] for one in ids]
    size = int(mode.rsplit("-", 1)[1])
    ordered = sorted(ids, key=len) if mode.startswith("sorted") else ids
    return [ordered[start : start + size] for start in range(0, len(ordered), size)]


def rate(backend: Backend, spec: ModelSpec, ids: list[np.ndarray], mode: str) -> float:
    """Sentences/s of one pass over ``ids`` batched as ``mode``."""
    groups = batches(ids, mode)
    if mode == "served-64":
        run: Callable[[list[np.ndarray]], object] = lambda group: run_batch(backend, group, spec.pad_id, settings.token_budget)
    else:
        run = lambda group: backend.forward(*pad(group, spec.pad_id))
    run(groups[0])  # warm-up
    started = time.perf_counter()
    for group in groups:
        run(group)
    return len(ids) / (time.perf_counter() - started)


def fidelity(backend: Backend, spec: ModelSpec, ids: list[np.ndarray], reference: np.ndarray) -> dict[str, float]:
    """Cosine to ``reference`` (torch fp32) of each text run alone (min, mean; nearest neighbours
    agreeing), and of alone vs in length-sorted batches of 32 (min)."""
    alone = np.stack([run_batch(backend, [one], spec.pad_id, settings.token_budget)[0] for one in ids])
    order = sorted(range(len(ids)), key=lambda index: len(ids[index]))
    batched = np.empty_like(alone)
    for start in range(0, len(order), 32):
        group = order[start : start + 32]
        batched[group] = backend.forward(*pad([ids[index] for index in group], spec.pad_id))

    from tests.test_onnx import cosines, nearest_neighbours  # the gates' own measures

    to_reference, invariance = cosines(alone, reference), cosines(alone, batched)
    return {
        "min": round(float(to_reference.min()), 4),
        "mean": round(float(to_reference.mean()), 5),
        "nearest_neighbour_agreement": round(float(np.mean(nearest_neighbours(alone) == nearest_neighbours(reference))), 4),
        "alone_vs_batched_min": round(float(invariance.min()), 7),
    }


def loaded(backend_name: str, tag: str) -> tuple[Backend, ModelSpec, list[np.ndarray]]:
    """The stored model ``tag`` on ``backend_name``, its spec, and the stream of short texts as token ids."""
    stored = bentoml.models.get(tag)
    spec = ModelSpec.of(stored)
    ids = [e.ids for e in TextTokenizer(stored.path, spec.max_length).encode(short_texts(STREAM))]
    return load_backend(backend_name, stored.path, spec, settings.runner_threads), spec, ids


def best_rate(backend: Backend, spec: ModelSpec, ids: list[np.ndarray], mode: str, rounds: int) -> float:
    return max(rate(backend, spec, ids, mode) for _ in range(rounds))


def ceilings(backend_name: str, tag: str, rounds: int = 2) -> tuple[str, list[dict]]:
    """The backend ``auto`` resolved to, and ``{"mode", "sentences_per_s"}`` for every way of batching (``MODES``)."""
    backend, spec, ids = loaded(backend_name, tag)
    return backend.name, [{"mode": mode, "sentences_per_s": round(best_rate(backend, spec, ids, mode, rounds), 1)} for mode in MODES]


def own_speed(model: tuple[Backend, ModelSpec, list[np.ndarray]], rounds: int = 2) -> dict:
    """The served compute's own speed here, without HTTP or the batcher: ``model`` as ``loaded("auto", tag)``
    makes it (``auto``'s choice on this machine, as the server makes it), a lone text's pass and length-sorted
    batches of 32, the best of ``rounds`` passes over the stream."""
    backend, spec, ids = model
    alone, sorted_32 = (best_rate(backend, spec, ids, mode, rounds) for mode in ("alone", "sorted-32"))
    return {
        "backend": backend.name,
        "precision": backend.precision,
        "alone_pass_ms": round(1000 / alone, 2),
        "sorted_32_texts_per_s": round(sorted_32, 1),
    }


def bench_tag() -> str:
    """The benchmark model, imported with its ONNX graphs on first use."""
    from models.store import default_model_dir, import_model

    try:
        return str(bentoml.models.get(f"{BENCH_MODEL}:latest").tag)
    except bentoml.exceptions.NotFound:
        source = "sentence-transformers/all-MiniLM-L6-v2"
        return str(import_model(default_model_dir(), name=BENCH_MODEL, source=source))
