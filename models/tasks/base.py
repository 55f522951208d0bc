"""What every task answers, with the answers most tasks share; each task's module overrides what is its own.

A task is what a served model does (``ModelSpec.task`` names it): how an import recognises it, what its
graph computes and answers, how the self-check compares a fast graph's answers with fp32's, and which
routes it serves. The torch, transformers and file-reading code each rule needs is imported where the
rule runs, so that an API worker, which reads only the routes' rules, loads no inference runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..postprocess import DenseLayer
from ..spec import ModelSpec
from ..tokenization import Side, SideTokenizer, TextTokenizer

if TYPE_CHECKING:  # read at import time only, never by an API worker
    import torch
    from transformers import PretrainedConfig

    from ..detection import Lengths


class Task:
    """One task's rules. ``name`` is what ``ModelSpec.task`` stores; ``graph_output`` the name of the exported
    graph's one output; ``per_token_output``: that output has a row per token (``[batch, sequence, ...]``) rather
    than per text; ``auto_class``: the transformers class that loads the model with its head."""

    name: str
    graph_output: str
    per_token_output: bool
    auto_class = "AutoModel"
    # One dense vector per text: its compact (int8/uint8) forms are calibrated at import, and bulk jobs write it.
    dense_vector_per_text = False
    # A decoder's transformers head reads each row's last token that is not ``config.pad_token_id``: its pad id matters.
    decoder_reads_pad_id = False
    # Documents ranked by the MaxSim of their token vectors with the query's, rather than by a classifier's score of the pair.
    ranks_by_maxsim = False

    # Import: recognising a model directory, refusing it as asked, and its spec.

    def recognizes(self, model_dir: Path, config: PretrainedConfig) -> bool:
        """Whether ``auto`` imports the model in ``model_dir`` as this task (tasks are asked most specific first)."""
        raise NotImplementedError

    def check_import(self, model_dir: Path, config: PretrainedConfig, asked: str) -> None:
        """Raises ``UnsupportedModel`` where this task's rule refuses the import as ``asked`` (``--task``, or ``auto``)."""

    def detected_spec(self, model_dir: Path, config: PretrainedConfig, tokenizer: Any, lengths: Lengths, common: dict) -> ModelSpec:
        """The spec of the model in ``model_dir`` as this task serves it; ``common``: the fields every spec has."""
        raise NotImplementedError

    # The graph: the torch module exported (and run by the torch backend), and what the backends answer from its output.

    def model_class(self) -> type:
        """The transformers auto class whose ``from_pretrained`` loads the model with this task's head."""
        import transformers

        return getattr(transformers, self.auto_class)

    def graph_module(self, model: torch.nn.Module, spec: ModelSpec, model_dir: str | Path) -> torch.nn.Module:
        """What the graph computes on top of the transformers model: here, its one output the backends use."""
        from ..heads import SingleOutput

        return SingleOutput(model, self.graph_output).eval()

    def graph_answer(
        self, spec: ModelSpec, output: np.ndarray, attention_mask: np.ndarray, dense: list[DenseLayer], width: int
    ) -> np.ndarray:
        """A backend's answer from the graph's output for a padded batch ``width`` tokens wide: here, the output itself."""
        return output

    # The self-check: what a fast graph's answers are compared by.

    def probe_token_ids(self, model_dir: str | Path, spec: ModelSpec, texts: Sequence[str]) -> list[np.ndarray]:
        """The probe texts' token ids as the model reads them."""
        return [encoded.ids for encoded in TextTokenizer(model_dir, spec.max_length).encode(texts)]

    def compared_rows(self, rows: Sequence[np.ndarray], token_ids: Sequence[np.ndarray]) -> np.ndarray:
        """One backend's answers to the probe as the rows whose cosines are compared: here, one per text."""
        return np.stack(rows)

    def comparable(self, candidate: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The compared rows as their cosines should see them: here, as they are."""
        return candidate, reference

    def own_gates(
        self, candidate: Sequence[np.ndarray], reference: Sequence[np.ndarray], spec: ModelSpec, token_ids: Sequence[np.ndarray]
    ) -> dict[str, float]:
        """The measures of this task's own gates beyond the cosines, by ``Fidelity`` field: here, none."""
        return {}

    # Routes: what it serves, and how the API describes it.

    def route_families(self, spec: ModelSpec) -> frozenset[str]:
        """The kinds of route the model serves (``api.catalog.Need``): here, its task's own."""
        return frozenset({self.name})

    def what_it_does(self, spec: ModelSpec) -> str:
        """What the model does, as an error message names it."""
        return repr(self.name)

    def side_tokenizers(self, model_dir: str | Path, spec: ModelSpec) -> dict[Side, SideTokenizer]:
        """Its query and document tokenizers, where the two sides are read differently: here, none."""
        return {}

    def sentence_pooling(self, spec: ModelSpec) -> str | None:
        """How token states pool into the one vector per text it answers; None where it answers no pooled vector."""
        return None

    def tei_model_type(self, spec: ModelSpec) -> dict[str, dict]:
        """text-embeddings-inference's ``model_type`` in ``/info``."""
        raise NotImplementedError

    def tei_root_route(self, spec: ModelSpec, body: Mapping[str, Any]) -> str:
        """Which TEI route answers a request to TEI's root route (``/``) with ``body``."""
        raise NotImplementedError
