"""How close a fast graph comes to fp32 (``Fidelity``), the gates it must pass to be served, and the
measures those gates read: cosines of rows, the L1 mass of flipped sparse weights, MaxSim's movement.

Below both the self-check (``models.selfcheck``, which runs the graphs) and the backends' interface
(``models.inference``, whose backends carry their ``Fidelity``), so that neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from .postprocess import maxsim, token_vectors

MIN_COSINE = 0.99
MEAN_COSINE = 0.998
MAX_FLIPPED_MASS = 0.005
MAX_MAXSIM_ERROR = 0.005


@dataclass(frozen=True)
class Fidelity:
    """How close a fast graph came to fp32 on the probe set, here, and whether that passes."""

    min_cosine: float
    mean_cosine: float
    probe_texts: int
    seconds: float  # the check itself: both graphs over the probe set
    max_flipped_mass: float | None = None  # sparse models only: ``flipped_mass``'s largest, over the probe
    max_maxsim_error: float | None = None  # multi-vector models only: ``maxsim_errors``' largest, over the probe

    @property
    def passed(self) -> bool:
        flips_pass = self.max_flipped_mass is None or self.max_flipped_mass <= MAX_FLIPPED_MASS
        scores_pass = self.max_maxsim_error is None or self.max_maxsim_error <= MAX_MAXSIM_ERROR
        return self.min_cosine >= MIN_COSINE and self.mean_cosine >= MEAN_COSINE and flips_pass and scores_pass

    def as_dict(self) -> dict:
        gates = {"min_cosine": MIN_COSINE, "mean_cosine": MEAN_COSINE}
        if self.max_flipped_mass is not None:
            gates["max_flipped_mass"] = MAX_FLIPPED_MASS
        if self.max_maxsim_error is not None:
            gates["max_maxsim_error"] = MAX_MAXSIM_ERROR
        return {**asdict(self), "passed": self.passed, "gates": gates}


@dataclass(frozen=True)
class Trial:
    """One compute ``auto`` weighed on this machine: how close it came to fp32, and how fast it ran here."""

    backend: str
    precision: str
    fidelity: Fidelity | None  # None: the fp32 graph, the reference itself
    texts_per_s: float | None  # ``speed``; None: it missed the gates and was not timed
    served: bool = False

    def as_dict(self) -> dict:
        return {**asdict(self), "fidelity": self.fidelity.as_dict() if self.fidelity else None}


def row_cosines(candidate: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """The cosine of each candidate row with its reference row."""
    product = (candidate * reference).sum(axis=1)
    norms = np.linalg.norm(candidate, axis=1) * np.linalg.norm(reference, axis=1)
    # Rows that are zero in both (a centred single logit of one text) agree; zero in one only, not.
    return np.where(norms > 0, product / np.maximum(norms, 1e-30), np.where(product == 0, 1.0, 0.0))


def flipped_mass(candidate: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per row of sparse weights: the share of the reference row's L1 mass that the weights zero on
    one side only stand for (each is what it can add to or take from a dot product with a query)."""
    flipped = (candidate != 0) != (reference != 0)
    moved = np.abs(candidate - reference).sum(axis=1, where=flipped)
    total = np.abs(reference).sum(axis=1)
    return np.where(total > 0, moved / np.maximum(total, 1e-30), np.where(moved == 0, 0.0, 1.0))


def maxsim_errors(
    candidate: Sequence[np.ndarray], reference: Sequence[np.ndarray], skiplist: Sequence[int], token_ids: Sequence[np.ndarray]
) -> np.ndarray:
    """Per probe query (the first half of ``token_ids``; documents the second), the largest change of
    its MaxSim score with any probe document, per query token."""
    half = len(token_ids) // 2

    def scores(rows: Sequence[np.ndarray]) -> np.ndarray:
        documents = [token_vectors(row, ids, skiplist) for row, ids in zip(rows[half:], token_ids[half:])]
        return np.array(
            [[maxsim(query.reshape(len(ids), -1), document) for document in documents] for query, ids in zip(rows[:half], token_ids)]
        )

    lengths = np.array([len(ids) for ids in token_ids[:half]])
    return np.abs(scores(candidate) - scores(reference)).max(axis=1) / lengths
