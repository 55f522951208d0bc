"""Cuts one collected batch into sub-batches that waste little padding, and pads them.

Texts are sorted by length and cut so that each sub-batch's padded size (rows × longest row)
stays under a token budget: short texts never pay for a long one's padding, and a sub-batch
never grows past what the backend runs efficiently. Results go back in the caller's order.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def plan_sub_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Index groups, shortest texts first, each group's ``len × max length`` ≤ ``token_budget``.

    A single text longer than the budget still gets a group of its own.
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    groups: list[list[int]] = []
    current: list[int] = []
    for index in order:
        # Ascending order: the newcomer is the longest, so it sets the padded width.
        if current and (len(current) + 1) * lengths[index] > token_budget:
            groups.append(current)
            current = []
        current.append(index)
    if current:
        groups.append(current)
    return groups


def pad(sequences: Sequence[np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask), both ``[rows, longest]`` int64, right-padded with ``pad_id``."""
    width = max(len(sequence) for sequence in sequences)
    input_ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(sequences), width), dtype=np.int64)
    for row, sequence in enumerate(sequences):
        input_ids[row, : len(sequence)] = sequence
        attention_mask[row, : len(sequence)] = 1
    return input_ids, attention_mask
