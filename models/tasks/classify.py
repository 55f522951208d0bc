"""``classify``: a ``*ForSequenceClassification`` model's logits, turned into scores per label; one with a single
label (a cross-encoder) also reranks, by its score of each (query, document) pair."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..spec import ModelSpec
from .base import Task

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from ..detection import Lengths


def is_sequence_classifier(config: PretrainedConfig) -> bool:
    return any(name.endswith("ForSequenceClassification") for name in config.architectures or [])


def is_reranker(spec: ModelSpec) -> bool:
    """One label: a cross-encoder's relevance score."""
    return len(spec.labels) == 1


class Classify(Task):
    name = "classify"
    graph_output = "logits"  # [batch, labels]
    per_token_output = False
    auto_class = "AutoModelForSequenceClassification"
    decoder_reads_pad_id = True

    def recognizes(self, model_dir: Path, config: PretrainedConfig) -> bool:
        return is_sequence_classifier(config)

    def check_import(self, model_dir: Path, config: PretrainedConfig, asked: str) -> None:
        from ..detection import UnsupportedModel

        if asked == self.name and not is_sequence_classifier(config):
            raise UnsupportedModel(
                "--task classify needs a *ForSequenceClassification model; "
                f"this one is {', '.join(config.architectures or [config.model_type])}"
            )

    def detected_spec(self, model_dir: Path, config: PretrainedConfig, tokenizer: Any, lengths: Lengths, common: dict) -> ModelSpec:
        from ..detection import read_activation, read_labels

        token_types = getattr(config, "type_vocab_size", 1) > 1
        return ModelSpec(
            max_length=lengths.served(), labels=read_labels(config), activation=read_activation(config), token_types=token_types, **common
        )

    def comparable(self, candidate: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Logits centred per text (the softmax ignores a shift); one logit (a reranker: what counts is the
        order it gives), the centred logits of the whole probe set as one row (their correlation)."""
        if candidate.shape[1] == 1:
            return tuple(rows.T - rows.mean() for rows in (candidate, reference))
        return tuple(rows - rows.mean(axis=1, keepdims=True) for rows in (candidate, reference))

    def route_families(self, spec: ModelSpec) -> frozenset[str]:
        return frozenset({self.name, "rerank"} if is_reranker(spec) else {self.name})

    def what_it_does(self, spec: ModelSpec) -> str:
        return "'rerank'" if is_reranker(spec) else f"'classify' ({len(spec.labels)} labels)"

    def tei_model_type(self, spec: ModelSpec) -> dict[str, dict]:
        labels = {"id2label": dict(enumerate(spec.labels)), "label2id": {label: i for i, label in enumerate(spec.labels)}}
        return {"reranker" if is_reranker(spec) else "classifier": labels}

    def tei_root_route(self, spec: ModelSpec, body: Mapping[str, Any]) -> str:
        return "rerank" if is_reranker(spec) else "predict"
