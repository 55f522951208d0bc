"""A stored model loaded to serve: its backend on its inference thread, warmed up, and its forward passes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .backends import load_backend
from .cpu import describe as describe_cpu
from .inference import InferenceThread, Pass, run_passes
from .spec import ModelSpec

logger = logging.getLogger("textbento")
# A lone short text, when nothing else is being answered, is computed on the caller's event loop:
# the hop to the parked inference thread and back and its wake-ups cost a lone request more than
# the pass (docs/design.md 8). The loop is held for one short pass, on a model whose lone pass is short:
# where a lone pass takes 10 ms or more, the loop gained nothing measurable (docs/design.md 8).
LOOP_PASS_TOKENS, LOOP_PASS_S = 128, 0.005

Wanted = Callable[[list[int]], list[int]]  # of a group of texts, those still worth computing


class Engine:
    """The model in ``model_dir`` on the backend ``backend`` (``auto`` holds its fast graph to fp32 first:
    ``models/selfcheck.py``), ready: warmed up before the first request, as the first passes are the slowest."""

    def __init__(
        self, model_dir: str | Path, spec: ModelSpec, backend: str, threads: int, token_budget: int, trust_remote_code: bool = False
    ) -> None:
        if spec.max_length > token_budget:  # a decoder's cap, or one raised with --max-length
            logger.warning(
                "the model reads up to %d tokens per text, past TEXTBENTO_TOKEN_BUDGET (%d): a text that long runs alone, "
                "in a pass of its own length; import it with --max-length to bound that",
                spec.max_length,
                token_budget,
            )
        self.spec, self.token_budget = spec, token_budget
        self.thread = InferenceThread()
        self.backend = self.thread.call(load_backend, backend, model_dir, spec, threads, trust_remote_code)
        # A batch, then lone texts (on a CPU they run on sessions of their own: models/backends/onnx_backend.Streams).
        took_s = [self.timed_pass(texts) for texts in (8, 1, 1, 1)]
        self.short_lone_pass = (
            self.backend.any_thread and min(took_s[2:]) <= LOOP_PASS_S
        )  # the warm lone passes: one hiccup decides nothing

    def timed_pass(self, texts: int) -> float:
        started = time.perf_counter()
        self.thread.call(self.forward, [np.ones(16, dtype=np.int32)] * texts)
        return time.perf_counter() - started

    def forward(self, token_ids: list[np.ndarray], wanted: Wanted | None = None) -> tuple[list[np.ndarray], list[Pass | None]]:
        """Each text's row and the pass that computed it (an empty row and None for a text not ``wanted``)."""
        return run_passes(self.backend, token_ids, self.spec.pad_id, self.token_budget, wanted)

    async def run(self, token_ids: list[np.ndarray], wanted: Wanted, alone: bool) -> tuple[list[np.ndarray], list[Pass | None]]:
        """``forward`` on the inference thread; on the calling event loop for a lone short text (``LOOP_PASS_TOKENS``)
        when nothing else is being answered (``alone``): not while other calls arrive, whose reading would wait for the pass."""
        if self.on_the_loop(token_ids, alone):
            return self.forward(token_ids, wanted)
        return await self.thread.run(self.forward, token_ids, wanted)

    def on_the_loop(self, token_ids: list[np.ndarray], alone: bool) -> bool:
        lone_short_text = len(token_ids) == 1 and len(token_ids[0]) <= LOOP_PASS_TOKENS
        return self.short_lone_pass and alone and self.thread.held == 0 and lone_short_text

    def card(self) -> dict[str, Any]:
        """How the model is served here: backend, device, precision, its fidelity to fp32, the trials ``auto`` weighed, the CPU."""
        backend = self.backend
        return {
            "backend": backend.name,
            "device": backend.device,
            "precision": backend.precision,
            "fidelity": backend.fidelity.as_dict() if backend.fidelity else None,
            "trials": [trial.as_dict() for trial in backend.trials],
            "cpu": describe_cpu(),
        }
