"""``embed``: one dense vector per text, the encoder's token states pooled (and through Dense layers, normalised)
as its sentence-transformers pipeline says; any encoder or decoder no other task claims."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..postprocess import DenseLayer, sentence_embeddings
from ..spec import ModelSpec
from .base import Task

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from ..detection import Lengths


class Embed(Task):
    name = "embed"
    graph_output = "last_hidden_state"  # pooled by the backends (``models.postprocess``), for every backend alike
    per_token_output = True
    dense_vector_per_text = True

    def recognizes(self, model_dir: Path, config: PretrainedConfig) -> bool:
        return True  # the task of every model the others leave

    def detected_spec(self, model_dir: Path, config: PretrainedConfig, tokenizer: Any, lengths: Lengths, common: dict) -> ModelSpec:
        from ..detection import read_sentence_transformers

        pipeline = read_sentence_transformers(model_dir)
        return ModelSpec(
            max_length=lengths.served(pipeline.max_seq_length),
            pooling=pipeline.pooling,
            normalize=pipeline.normalize,
            dimensions=pipeline.dense[-1][2] if pipeline.dense else config.hidden_size,
            dense=tuple(activation for _, activation, _ in pipeline.dense),
            prompts=pipeline.prompts,
            default_prompt_name=pipeline.default_prompt_name,
            **common,
        )

    def graph_answer(
        self, spec: ModelSpec, output: np.ndarray, attention_mask: np.ndarray, dense: list[DenseLayer], width: int
    ) -> np.ndarray:
        """The token states pooled into sentence embeddings."""
        return sentence_embeddings(output, attention_mask, spec.pooling, spec.normalize, dense)

    def sentence_pooling(self, spec: ModelSpec) -> str | None:
        return spec.pooling

    def tei_model_type(self, spec: ModelSpec) -> dict[str, dict]:
        return {"embedding": {"pooling": spec.pooling}}

    def tei_root_route(self, spec: ModelSpec, body: Mapping[str, Any]) -> str:
        """``/similarity`` for a source sentence and sentences (huggingface_hub's ``sentence_similarity``), else ``/embed``."""
        return "similarity" if isinstance(body.get("inputs"), dict) else "embed"
