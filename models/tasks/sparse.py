"""``sparse``: a SPLADE vector per text (a weight per vocabulary id, most of them zero), pooled inside the graph
from a masked LM's logits; a sentence-transformers SparseEncoder (MLM + SpladePooling)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..fidelity import flipped_mass
from ..spec import ModelSpec
from .base import Task

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

    from ..detection import Lengths


class Sparse(Task):
    name = "sparse"
    graph_output = "sparse_embedding"  # [batch, vocabulary]: the [batch, sequence, vocabulary] logits are too large to leave it
    per_token_output = False
    auto_class = "AutoModelForMaskedLM"

    def recognizes(self, model_dir: Path, config: PretrainedConfig) -> bool:
        from ..detection import is_sparse_encoder

        return is_sparse_encoder(model_dir)

    def check_import(self, model_dir: Path, config: PretrainedConfig, asked: str) -> None:
        from ..detection import UnsupportedModel, is_sparse_encoder

        sparse = is_sparse_encoder(model_dir)
        if asked == self.name and not sparse:
            raise UnsupportedModel(
                "--task sparse needs a sentence-transformers SparseEncoder (modules.json: MLMTransformer + SpladePooling)"
            )
        if sparse and asked not in ("auto", self.name):
            raise UnsupportedModel(
                f"a sentence-transformers SparseEncoder (SPLADE) gives sparse vectors: import it with --task sparse (or auto), not {asked}"
            )

    def detected_spec(self, model_dir: Path, config: PretrainedConfig, tokenizer: Any, lengths: Lengths, common: dict) -> ModelSpec:
        from ..detection import read_length_and_prompts, read_splade

        sparse_pooling, sparse_activation = read_splade(model_dir, config)
        max_seq_length, prompts, default_prompt_name = read_length_and_prompts(model_dir)
        return ModelSpec(
            max_length=lengths.served(max_seq_length),
            dimensions=config.vocab_size,
            sparse_pooling=sparse_pooling,
            sparse_activation=sparse_activation,
            prompts=prompts,
            default_prompt_name=default_prompt_name,
            **common,
        )

    def graph_module(self, model: torch.nn.Module, spec: ModelSpec, model_dir: str | Path) -> torch.nn.Module:
        """SPLADE's pooled weights (``models.heads.SpladeEncoder``)."""
        from ..heads import SpladeEncoder

        return SpladeEncoder(model, spec).eval()

    def own_gates(
        self, candidate: Sequence[np.ndarray], reference: Sequence[np.ndarray], spec: ModelSpec, token_ids: Sequence[np.ndarray]
    ) -> dict[str, float]:
        """Which ids are non-zero is what an inverted index stores: the mass of the weights zero on one graph only."""
        return {"max_flipped_mass": float(f"{flipped_mass(np.stack(candidate), np.stack(reference)).max():.3g}")}

    def tei_model_type(self, spec: ModelSpec) -> dict[str, dict]:
        return {"embedding": {"pooling": "splade"}}

    def tei_root_route(self, spec: ModelSpec, body: Mapping[str, Any]) -> str:
        return "embed_sparse"
