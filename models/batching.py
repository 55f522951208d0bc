"""Cuts one collected batch into forward passes that waste little padding, and pads them.

Texts are sorted by length and cut where it is cheapest: a pass costs its padded tokens
(rows × longest row) plus a fixed cost, and no pass exceeds the token budget. Short texts then
never pay for a long one's padding, and a batch of like lengths still runs as one pass. Results
go back in the caller's order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# The fixed cost of a forward pass in padded tokens, as the cut should count it. Fitted on passes of
# one width (time = a × padded tokens + b), a pass of the int8 graph in streams costs ~32 tokens
# beyond its padded ones for MiniLM and ~6 for DistilBERT, but the same runs of 64 short texts ran
# faster cut with 64 than with 32, for both models: small passes cost more than their tokens predict
# (docs/design.md 5, batching).
PASS_COST_TOKENS = 64


def plan_sub_batches(lengths: Sequence[int], token_budget: int, pass_cost: int = PASS_COST_TOKENS) -> list[list[int]]:
    """Index groups, shortest texts first, each group's ``len × max length`` ≤ ``token_budget``.

    The cuts minimise the total cost (padded tokens + ``pass_cost`` per group) over the sorted
    order (dynamic programming over at most ``len²/2`` cuts). A single text longer than the budget
    still gets a group of its own.
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    sorted_lengths = [lengths[index] for index in order]
    cost = [0.0] + [float("inf")] * len(order)  # cost[i]: the cheapest cut of the i shortest
    start = [0] * (len(order) + 1)  # where the last group of that cut starts
    for end in range(1, len(order) + 1):
        width = sorted_lengths[end - 1]  # ascending: the last text sets the padded width
        for first in range(end - 1, -1, -1):
            rows = end - first
            if rows > 1 and rows * width > token_budget:
                break
            if (total := cost[first] + pass_cost + rows * width) < cost[end]:
                cost[end], start[end] = total, first
    groups: list[list[int]] = []
    end = len(order)
    while end:
        groups.append(order[start[end] : end])
        end = start[end]
    return groups[::-1]


def balanced_slices(lengths: Sequence[int], count: int) -> list[slice]:
    """At most ``count`` contiguous slices of the rows, the largest slice's padded tokens (rows × its
    longest row) as small as can be: the slices of one pass that run at once, one per core, finish
    together. Found by bisecting that size, each try cut greedily (the fewest slices under it)."""

    def cut(limit: int) -> list[slice]:
        slices, start, longest = [], 0, 0
        for end, length in enumerate(lengths):
            if end > start and (end - start + 1) * max(longest, length) > limit:
                slices.append(slice(start, end))
                start, longest = end, 0
            longest = max(longest, length)
        return [*slices, slice(start, len(lengths))]

    low, high = max(lengths), len(lengths) * max(lengths)  # one row alone; every row in one slice
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if len(cut(middle)) <= count else (middle + 1, high)
    return cut(low)


# A text pair's second text travels as token ids with its token type in the high bits, so that
# one int32 array per text still carries everything (API workers → Encoder → batching); vocabularies
# stay far below 2**24 ids.
SEGMENT_SHIFT = 24


def with_segments(ids: np.ndarray, type_ids: np.ndarray) -> np.ndarray:
    """Token ids with their token type ids folded in (``split_segments`` undoes it)."""
    return ids | (type_ids.astype(ids.dtype) << SEGMENT_SHIFT)


def split_segments(input_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, token type ids) of padded ids built with ``with_segments``."""
    return input_ids & ((1 << SEGMENT_SHIFT) - 1), input_ids >> SEGMENT_SHIFT


# A multi-vector model's query expansion tokens (``models.tokenization.SideTokenizer``) carry this bit in
# their ids: each is a token of the row whose vector is computed and kept, but that no token attends to.
# ``pad`` turns it into the mask value ``UNATTENDED`` (real tokens: 1, padding: 0), which the model reads
# (``models.heads.TokenVectors``).
UNATTENDED_BIT = 1 << 30
UNATTENDED = 2


def unattended(ids: np.ndarray) -> np.ndarray:
    """Token ids marked as tokens nobody attends to (``pad`` reads the mark)."""
    return ids | UNATTENDED_BIT


def pad(sequences: Sequence[np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask), both ``[rows, longest]`` int64, right-padded with ``pad_id``; the
    mask is 1 on a row's tokens, ``UNATTENDED`` on those marked so, 0 on padding."""
    width = max(len(sequence) for sequence in sequences)
    input_ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(sequences), width), dtype=np.int64)
    for row, sequence in enumerate(sequences):
        input_ids[row, : len(sequence)] = sequence
        attention_mask[row, : len(sequence)] = 1
    marked = (input_ids & UNATTENDED_BIT) != 0
    if marked.any():
        attention_mask[marked] = UNATTENDED
        input_ids[marked] &= ~UNATTENDED_BIT
    return input_ids, attention_mask
