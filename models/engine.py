"""A stored model loaded to serve: its backend on its inference thread, warmed up, and its forward passes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .backends import load_backend
from .cpu import describe as describe_cpu
from .inference import InferenceThread, Pass, run_passes
from .spec import ModelSpec

logger = logging.getLogger("textbento")

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
        # A batch, then lone texts (on a CPU they run on sessions of their own: models/backends/onnx_backend.Streams);
        # then the largest pass the budget allows, and the longest lone text, so that the memory their buffers
        # take is taken now: what a model holds after start-up is what it holds under load (docs/design.md 3).
        longest = min(spec.max_length, token_budget)
        for texts, tokens in ((8, 16), (1, 16), (1, 16), (token_budget // longest, longest), (1, longest)):
            self.thread.call(self.forward, [np.ones(tokens, dtype=np.int32)] * texts)

    def forward(self, token_ids: list[np.ndarray], wanted: Wanted | None = None) -> tuple[list[np.ndarray], list[Pass | None]]:
        """Each text's row and the pass that computed it (an empty row and None for a text not ``wanted``)."""
        return run_passes(self.backend, token_ids, self.spec.pad_id, self.token_budget, wanted)

    async def run(self, token_ids: list[np.ndarray], wanted: Wanted) -> tuple[list[np.ndarray], list[Pass | None]]:
        """``forward`` on the inference thread, so that the event loop goes on reading calls while the pass runs
        (a lone text's pass on the loop itself gained nothing measurable: docs/design.md 8)."""
        return await self.thread.run(self.forward, token_ids, wanted)

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
