"""The start-up self-check: a fast graph held to the fp32 graph on the machine that will serve it.

int8 kernels (and fp16 on a GPU) differ by CPU class, not just speed (``models.cpu``): a recipe
that passes the gates where it was measured can serve wrong vectors elsewhere. So before ``auto``
serves a fast graph, it runs a small built-in probe set through it and through the fp32 graph
(both stored with the model), and serves the fast one only if it is within the
gates of ``tests/test_onnx.py``: min cosine 0.99, mean 0.998.

A SPLADE model's weights are also held to a gate a cosine does not see: which ids are non-zero is
what an inverted index stores, and a fast graph turns weights near zero to zero or back. The
weights that are zero on one graph only may hold at most ``MAX_FLIPPED_MASS`` of a text's L1 mass
(docs/design.md 13: where per-token int8 passed the cosines its flips held ≤ 0.31% of a text's
mass; a candidate that drops the small weights holding 2% keeps min cosine 0.9989).

A multi-vector (ColBERT) model is checked on what it serves: its token vectors one by one (the cosine
gates, over every token of the probe texts as queries and as documents), and the MaxSim score of every
probe query with every probe document, which ranks documents: no score may move by more than
``MAX_MAXSIM_ERROR`` per query token (a score is a sum over the query's tokens of cosines, each in [-1, 1]).

What is compared: embeddings row by row (cosine); a classifier's logits centred per text (the
softmax ignores a shift), or, for one logit (rerankers: what counts is the order it gives), the
centred logits of the whole probe set as one vector (their correlation). Each task's module
(``models.tasks``) says how its answers are compared and which gates of its own it adds;
``models.fidelity`` holds the gates and their measures.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .batching import pad
from .fidelity import MAX_FLIPPED_MASS, MAX_MAXSIM_ERROR, MEAN_COSINE, MIN_COSINE, Fidelity, flipped_mass, row_cosines  # noqa: F401 (the gates, beside the check)
from .inference import Backend, run_batch
from .spec import ModelSpec
from .tasks import task_of

# Where int8 errors show first (1-3 tokens, code, digits, accents, emoji; "?" is the text that
# ONNX Runtime's saturating u8×s8 kernels on AVX2 got most wrong, cosine 0.873), mixed 1:3 with
# ordinary sentences as the gate texts of tests/test_onnx.py mix them (27 hard in 267), so that
# the mean gate means what it means there.
HARD_TEXTS = (
    "?",
    "ok",
    "42",
    "🙂",
    "x = f(y) + 3;",
    "SELECT id FROM users WHERE age > 30;",
    "2026-11-30 23:59 UTC",
    "Ça coûte 12,50 € déjà vu",
)
SENTENCES = (
    "How do I reset my password?",
    "The train to Lyon leaves at nine from platform four.",
    "Our quarterly revenue grew by twelve percent.",
    "She plays the violin in a small jazz band on Fridays.",
    "Add the garlic and simmer the soup for ten minutes.",
    "The striker scored twice before half time.",
    "Heavy rain and strong winds are expected tonight.",
    "The patient was given antibiotics for the infection.",
    "Please send me the invoice for last month.",
    "A telescope on the mountain photographed the comet.",
    "The new compiler release fixes a memory leak in the parser.",
    "Water the tomatoes every morning during the heatwave.",
    "Parliament will vote on the budget next week.",
    "My flight was delayed and my luggage is lost.",
    "The kitten sleeps on the sofa all afternoon.",
    "Interest rates rose again, and mortgages got more expensive.",
    "Can you recommend a quiet hotel near the beach?",
    "The database migration finished without errors overnight.",
    "I loved the film, but the ending was far too long.",
    "Customers reported slower answers after the cache was cleared.",
    "The museum opens at ten and closes at six on weekdays.",
    "He fixed the bug by checking the length before the copy.",
    "Notes on the quarterly review: revenue grew, costs fell, and the team shipped the new search engine two "
    "weeks early, although the migration of the old index took longer than planned.",
    "Symptoms include fever, a dry cough and tiredness for several days.",
)
PROBE_TEXTS = HARD_TEXTS + SENTENCES
PROBE_TOKEN_BUDGET = 2048
ALONE = 4
SPEED_RUNS = 3


def speeds(backends: list[Backend], spec: ModelSpec, token_ids: list[np.ndarray]) -> list[float]:
    """Each backend's texts per second here over the mix a server runs: the probe in length-sorted
    batches (full batches under load), then its first ``ALONE`` texts one at a time (single texts
    when idle). The best of ``SPEED_RUNS`` rounds that take the backends in turn, so that a burst of
    other work on the machine (its API workers starting) slows every backend's round, not one."""
    fastest = [float("inf")] * len(backends)
    for _ in range(SPEED_RUNS):
        for index, backend in enumerate(backends):
            started = time.perf_counter()
            run_batch(backend, token_ids, spec.pad_id, PROBE_TOKEN_BUDGET)
            for ids in token_ids[:ALONE]:
                backend.forward(*pad([ids], spec.pad_id))
            fastest[index] = min(fastest[index], time.perf_counter() - started)
    return [round((len(token_ids) + ALONE) / seconds, 1) for seconds in fastest]


def agreement(candidate: np.ndarray, reference: np.ndarray, spec: ModelSpec) -> np.ndarray:
    """The cosines the gates are read from, of the rows as the model's task compares them (the module's docstring says how)."""
    return row_cosines(*task_of(spec).comparable(candidate, reference))


def probe_ids(model_dir: str | Path, spec: ModelSpec) -> list[np.ndarray]:
    """The probe texts' token ids as the model reads them (a multi-vector model's as queries, then as documents)."""
    return task_of(spec).probe_token_ids(model_dir, spec, PROBE_TEXTS)


def self_check(candidate: Backend, reference: Backend, spec: ModelSpec, token_ids: list[np.ndarray]) -> Fidelity:
    """``candidate`` against ``reference`` on the probe's token ids (``probe_ids``), in
    length-sorted batches: per-token int8 and fp32 give a text the same row alone or batched."""
    started = time.perf_counter()
    task = task_of(spec)
    rows = [run_batch(backend, token_ids, spec.pad_id, PROBE_TOKEN_BUDGET) for backend in (candidate, reference)]
    own_gates = task.own_gates(*rows, spec, token_ids)
    cosines = agreement(*(task.compared_rows(backend_rows, token_ids) for backend_rows in rows), spec)
    return Fidelity(
        round(float(cosines.min()), 5),
        round(float(cosines.mean()), 5),
        len(token_ids),
        round(time.perf_counter() - started, 3),
        **own_gates,
    )
