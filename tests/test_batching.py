"""Batch assembly: length-sorted, token-budgeted sub-batches, padding bounded, order restored."""

import itertools

import numpy as np
import pytest

from models import engine
from models.batching import UNATTENDED, balanced_slices, pad, plan_sub_batches, unattended
from models.inference import run_batch, run_passes
from models.spec import ModelSpec


def test_groups_cover_every_index_once_shortest_first():
    lengths = [30, 5, 12, 5, 200, 7]
    groups = plan_sub_batches(lengths, token_budget=64)
    flat = [i for group in groups for i in group]
    assert sorted(flat) == list(range(len(lengths)))
    assert [lengths[i] for i in flat] == sorted(lengths)


@pytest.mark.parametrize("budget", [16, 64, 256, 8192])
def test_padded_size_stays_under_budget(budget):
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 120, size=200).tolist()
    for group in plan_sub_batches(lengths, budget):
        padded = len(group) * max(lengths[i] for i in group)
        assert padded <= budget or len(group) == 1


@pytest.mark.parametrize("count", [2, 3, 4])
def test_a_pass_is_cut_into_slices_of_the_least_largest_padded_size(count):
    """Against every way of cutting small passes: the slices cover the rows in order, and no cut into at
    most ``count`` slices has a smaller largest slice (rows × its longest row)."""
    rng = np.random.default_rng(count)
    for _ in range(200):
        lengths = sorted(rng.integers(2, 60, size=rng.integers(1, 9)).tolist())
        slices = balanced_slices(lengths, count)
        assert [row for part in slices for row in range(len(lengths))[part]] == list(range(len(lengths))) and len(slices) <= count
        size = lambda parts, lengths=lengths: max((part.stop - part.start) * max(lengths[part]) for part in parts)
        best = min(
            size([slice(a, b) for a, b in zip((0, *cuts), (*cuts, len(lengths)))])
            for k in range(min(count, len(lengths)))
            for cuts in itertools.combinations(range(1, len(lengths)), k)
        )
        assert size(slices) == best, lengths


def test_short_texts_do_not_pay_for_a_long_one():
    lengths = [8] * 31 + [256]
    groups = plan_sub_batches(lengths, token_budget=512)
    long_group = next(g for g in groups if 31 in g)
    assert long_group == [31]
    padded = sum(len(g) * max(lengths[i] for i in g) for g in groups)
    assert padded <= 8 * 31 + 256


def test_pad_right_pads_with_mask():
    ids, mask = pad([np.array([1, 2, 3]), np.array([4])], pad_id=0)
    assert ids.tolist() == [[1, 2, 3], [4, 0, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert ids.dtype == np.int64 and mask.dtype == np.int64


def test_unattended_tokens_are_rows_tokens_with_a_mask_of_their_own():
    """A query's expansion tokens (multi-vector models): plain ids, mask ``UNATTENDED``, padding still 0."""
    query = np.concatenate([np.array([101, 7, 102], dtype=np.int32), unattended(np.array([103, 103], dtype=np.int32))])
    ids, mask = pad([query, np.array([5, 6], dtype=np.int32)], pad_id=0)
    assert ids.tolist() == [[101, 7, 102, 103, 103], [5, 6, 0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, UNATTENDED, UNATTENDED], [1, 1, 0, 0, 0]]


class TokenRows:
    """Returns a ``[rows, width, 2]`` row per text, as a multi-vector model's token vectors come."""

    name, device = "tokens", "cpu"

    def forward(self, input_ids, attention_mask):
        return np.stack([input_ids, attention_mask], axis=-1).astype(np.float32)


def test_token_rows_are_cut_to_their_texts_tokens_and_counted_once():
    query = np.concatenate([np.array([1, 2], dtype=np.int32), unattended(np.array([9, 9, 9], dtype=np.int32))])
    rows, passes = run_passes(TokenRows(), [query, np.array([4], dtype=np.int32)], pad_id=0, token_budget=64)
    assert rows[0][:, 0].tolist() == [1, 2, 9, 9, 9] and rows[1].tolist() == [[4, 1]]
    assert passes[0].tokens == 6  # every token of both texts once, the unattended ones too


class RecordingBackend:
    """Returns each row's first token id and sequence length, and records the shapes it saw."""

    name, device = "recording", "cpu"

    def __init__(self):
        self.shapes = []

    def forward(self, input_ids, attention_mask):
        self.shapes.append(input_ids.shape)
        return np.stack([input_ids[:, 0], attention_mask.sum(axis=1)], axis=1).astype(np.float32)


def test_run_batch_restores_request_order_and_bounds_padding():
    rng = np.random.default_rng(1)
    sequences = [np.full(int(n), i, dtype=np.int32) for i, n in enumerate(rng.integers(2, 100, size=50))]
    backend = RecordingBackend()
    outputs = run_batch(backend, sequences, pad_id=0, token_budget=256)
    assert [int(row[0]) for row in outputs] == list(range(50))
    assert [int(row[1]) for row in outputs] == [len(s) for s in sequences]
    assert all(rows * width <= 256 or rows == 1 for rows, width in backend.shapes)


def test_like_lengths_run_as_one_pass_unlike_ones_are_cut():
    assert plan_sub_batches([20] * 64, token_budget=8192) == [list(range(64))]
    lengths = [40, 10] * 32  # one pass of 64 would pad the 32 short ones to 40
    groups = plan_sub_batches(lengths, token_budget=8192)
    assert [sorted({lengths[i] for i in group}) for group in groups] == [[10], [40]]


def test_each_text_reports_the_pass_that_computed_it():
    sequences = [np.full(n, 1, dtype=np.int32) for n in (3, 50, 4, 60, 5)]
    backend = RecordingBackend()
    _, passes = run_passes(backend, sequences, pad_id=0, token_budget=128)
    assert len(backend.shapes) == len(set(passes)) == 2  # the short three, the long two
    for sequence, forward in zip(sequences, passes):
        rows, width = next(shape for shape in backend.shapes if shape[0] == forward.texts)
        assert forward.padded_tokens == rows * width and len(sequence) <= width
        assert forward.tokens == sum(len(s) for s, p in zip(sequences, passes) if p == forward)
        assert forward.started <= forward.finished


@pytest.mark.parametrize(("max_length", "budget", "largest"), [(256, 2048, (8, 256)), (4096, 2048, (1, 2048))])
def test_the_warm_up_runs_the_largest_pass_and_the_longest_lone_text(monkeypatch, max_length: int, budget: int, largest):
    """So that the memory a pass's buffers take is taken at start-up, not under the first burst of load
    (without it, ``make storm``'s SPLADE Encoder grows past its warm-up as ever larger passes come)."""
    shapes = []

    class Recording:
        def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
            shapes.append(input_ids.shape)
            return np.zeros((len(input_ids), 4), dtype=np.float32)

    monkeypatch.setattr(engine, "load_backend", lambda *args: Recording())
    engine.Engine("unused", ModelSpec(task="embed", max_length=max_length), "onnx", 1, budget)
    assert largest in shapes and (1, largest[1]) in shapes
    assert max(rows * tokens for rows, tokens in shapes) <= budget
