"""``multivector``: a unit-length vector per token (PyLate's ColBERT), queries and documents tokenized each their
own way; it reranks by MaxSim, the sum over the query's tokens of each one's best match in the document."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..fidelity import maxsim_errors
from ..postprocess import DenseLayer
from ..spec import ModelSpec
from ..tokenization import Side, SideTokenizer
from .base import Task

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

    from ..detection import Lengths

SIDES: tuple[Side, ...] = ("query", "document")


class Multivector(Task):
    name = "multivector"
    graph_output = "token_embeddings"  # [batch, sequence, dim], projected and normalised inside
    per_token_output = True
    ranks_by_maxsim = True

    def recognizes(self, model_dir: Path, config: PretrainedConfig) -> bool:
        from ..detection import is_colbert

        return is_colbert(model_dir)

    def check_import(self, model_dir: Path, config: PretrainedConfig, asked: str) -> None:
        from ..detection import UnsupportedModel, is_colbert

        colbert = is_colbert(model_dir)
        if colbert and asked not in ("auto", self.name):
            raise UnsupportedModel(
                f"a PyLate ColBERT model gives a vector per token: import it with --task multivector (or auto), not {asked}"
            )
        if not colbert and (asked == self.name or "HF_ColBERT" in (config.architectures or [])):
            raise UnsupportedModel(
                "a multi-vector model is served as PyLate saves a ColBERT (config_sentence_transformers.json: model_type ColBERT); "
                "a Stanford ColBERT checkpoint (HF_ColBERT) can be loaded with pylate.models.ColBERT and saved with its save()"
            )

    def detected_spec(self, model_dir: Path, config: PretrainedConfig, tokenizer: Any, lengths: Lengths, common: dict) -> ModelSpec:
        """Documents up to its document length (``--max-length`` sets it), queries up to its query length, both
        within the model's own limit (and ``--max-length``)."""
        from ..detection import read_colbert, read_colbert_dense, read_length_and_prompts

        colbert = read_colbert(model_dir, tokenizer)
        dense = read_colbert_dense(model_dir)
        _, prompts, default_prompt_name = read_length_and_prompts(model_dir)  # PyLate's encode puts them before queries and documents alike
        return ModelSpec(
            max_length=lengths.served(colbert.document_length),
            query_length=min(colbert.query_length, lengths.chosen or lengths.own),
            normalize=True,
            dimensions=dense[-1][2],
            dense=tuple(activation for _, activation, _ in dense),
            query_prefix_id=colbert.query_prefix_id,
            document_prefix_id=colbert.document_prefix_id,
            expansion_id=colbert.expansion_id,
            attend_to_expansion=colbert.attend_to_expansion,
            skiplist=colbert.skiplist,
            prompts=prompts,
            default_prompt_name=default_prompt_name,
            **common,
        )

    def graph_module(self, model: torch.nn.Module, spec: ModelSpec, model_dir: str | Path) -> torch.nn.Module:
        """The token vectors, projected and unit length (``models.heads.TokenVectors``)."""
        from ..heads import TokenVectors

        return TokenVectors(model, spec, model_dir).eval()

    def graph_answer(
        self, spec: ModelSpec, output: np.ndarray, attention_mask: np.ndarray, dense: list[DenseLayer], width: int
    ) -> np.ndarray:
        """The token vectors padded to the batch's ``width`` (a stream's slice is cut to its own longest row; the slices are joined)."""
        return np.pad(output, ((0, 0), (0, width - output.shape[1]), (0, 0)))

    def probe_token_ids(self, model_dir: str | Path, spec: ModelSpec, texts: Sequence[str]) -> list[np.ndarray]:
        """The probe texts as queries, then as documents."""
        return [encoded.ids for side in SIDES for encoded in SideTokenizer(model_dir, spec, side).encode(texts)]

    def compared_rows(self, rows: Sequence[np.ndarray], token_ids: Sequence[np.ndarray]) -> np.ndarray:
        """Every token's vector is a row to compare."""
        return np.concatenate([row.reshape(len(ids), -1) for row, ids in zip(rows, token_ids)])

    def own_gates(
        self, candidate: Sequence[np.ndarray], reference: Sequence[np.ndarray], spec: ModelSpec, token_ids: Sequence[np.ndarray]
    ) -> dict[str, float]:
        """MaxSim ranks documents: how far any probe query's score with any probe document moved, per query token."""
        return {"max_maxsim_error": float(f"{maxsim_errors(candidate, reference, spec.skiplist, token_ids).max():.3g}")}

    def route_families(self, spec: ModelSpec) -> frozenset[str]:
        return frozenset({self.name, "rerank"})

    def what_it_does(self, spec: ModelSpec) -> str:
        """It has no single vector per text to give: its routes are named."""
        return "'multivector' (a vector per token: /v1/multivector, /embed_all; MaxSim on /v1/rerank, /rerank)"

    def side_tokenizers(self, model_dir: str | Path, spec: ModelSpec) -> dict[Side, SideTokenizer]:
        return {side: SideTokenizer(model_dir, spec, side) for side in SIDES}

    def tei_model_type(self, spec: ModelSpec) -> dict[str, dict]:
        return {"embedding": {"pooling": "none"}}  # token vectors: nothing pooled

    def tei_root_route(self, spec: ModelSpec, body: Mapping[str, Any]) -> str:
        """``/rerank`` given a query, else ``/embed_all``."""
        return "rerank" if "query" in body else "embed_all"
