"""One collected batch of token-id sequences through the backend, answers back in request order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np

from .batching import pad, plan_sub_batches
from .fidelity import Fidelity, Trial

T = TypeVar("T")


class Backend(Protocol):
    """A loaded model on one device.

    ``forward`` takes right-padded ``[rows, width]`` int64 ids and mask and returns ``[rows, labels]``
    logits, ``[rows, dim]`` embeddings or ``[rows, width, dim]`` token vectors as float32, one row per input row.
    """

    name: str
    device: str
    precision: str  # what the graph computes in, e.g. "fp32", "int8", "fp16"
    fidelity: Fidelity | None  # where ``auto`` checked it against fp32 (``models.selfcheck``)
    trials: tuple[Trial, ...]  # where ``auto`` chose it: every compute it weighed here

    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray: ...


class Pass(NamedTuple):
    """One forward pass, as each text it carried reports it (to the timing headers and metrics)."""

    started: float  # wall clock (time.time()): comparable across the processes of a pod
    finished: float
    texts: int
    padded_tokens: int  # rows × longest row
    tokens: int  # the real ones


def run_batch(backend: Backend, token_ids: Sequence[np.ndarray], pad_id: int, token_budget: int) -> list[np.ndarray]:
    """One output row per input sequence, in input order, computed in length-sorted sub-batches."""
    return run_passes(backend, token_ids, pad_id, token_budget)[0]


def run_window(backend: Backend, token_ids: Sequence[np.ndarray], pad_id: int, token_budget: int) -> list[np.ndarray]:
    """``run_batch``'s rows for a job that waits for all of them (a bulk window). A backend that runs
    in streams takes whole passes, each under a stream's share of the budget, one per stream as it
    comes free (``forward_each``), instead of every pass cut across the streams and joined: more texts/s
    for a job that waits for them all (docs/bulk.md)."""
    at_once = getattr(backend, "passes_at_once", 1)
    if at_once == 1:
        return run_batch(backend, token_ids, pad_id, token_budget)
    groups = plan_sub_batches([len(ids) for ids in token_ids], token_budget // at_once)
    answers = backend.forward_each(pad([token_ids[index] for index in group], pad_id) for group in groups)
    outputs: list[np.ndarray] = [np.empty(0)] * len(token_ids)
    for group, rows in zip(groups, answers):
        place(outputs, group, rows, token_ids)
    return outputs


def place(outputs: list[np.ndarray], group: list[int], rows: np.ndarray, token_ids: Sequence[np.ndarray]) -> None:
    """A pass's answer rows into ``outputs`` at their texts' places; token vectors cut to their text's tokens."""
    for index, row in zip(group, rows):
        outputs[index] = row[: len(token_ids[index])] if row.ndim == 2 else row


def run_passes(
    backend: Backend,
    token_ids: Sequence[np.ndarray],
    pad_id: int,
    token_budget: int,
    wanted: Callable[[list[int]], list[int]] | None = None,
) -> tuple[list[np.ndarray], list[Pass | None]]:
    """``run_batch``'s rows, and for each sequence the forward pass that computed it. ``wanted``, asked
    just before each pass, keeps the sequences still worth computing; the others get an empty row
    and no pass (a pass that has started always finishes). Token vectors are cut to their sequence's tokens."""
    outputs: list[np.ndarray] = [np.empty(0)] * len(token_ids)
    passes: list[Pass | None] = [None] * len(token_ids)
    for planned in plan_sub_batches([len(ids) for ids in token_ids], token_budget):
        group = wanted(planned) if wanted else planned
        if not group:
            continue
        input_ids, attention_mask = pad([token_ids[index] for index in group], pad_id)
        started = time.time()
        rows = backend.forward(input_ids, attention_mask)
        forward = Pass(started, time.time(), len(group), input_ids.size, int(np.count_nonzero(attention_mask)))
        place(outputs, group, rows, token_ids)
        for index in group:
            passes[index] = forward
    return outputs, passes


class InferenceThread:
    """One dedicated thread for everything that touches the model: loading, warm-up, every batch.

    torch's CPU thread pool (OpenMP) belongs to the thread that calls into it: a model loaded on
    one thread and run from a pool's thread, which is what a sync BentoML API does, runs more than
    twice as slow (docs/design.md 2). Keeping it all on one thread also keeps the
    event loop free without a second hop.
    """

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inference")
        self.held = 0  # batches waiting for the thread or running on it

    def call(self, function: Callable[..., T], *args: Any) -> T:
        """Runs ``function`` on the inference thread and waits (start-up only)."""
        return self._executor.submit(function, *args).result()

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """Runs ``function`` on the inference thread without blocking the event loop."""
        self.held += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)
        finally:
            self.held -= 1
