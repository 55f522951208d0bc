"""Works out a ``ModelSpec`` from a Hugging Face ``save_pretrained`` directory (import time only).

Sequence classifiers are recognised by their architecture; any other encoder is served as an
embedder, with pooling, normalisation and length limit taken from the sentence-transformers
files when the directory has them (mean pooling otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import PretrainedConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

from .spec import ModelSpec, Pooling, Task


class UnsupportedModel(ValueError):
    """The directory holds something textbento cannot serve; the message says what and why."""


def detect_task(config: PretrainedConfig, override: str = "auto") -> Task:
    """``classify`` for ``*ForSequenceClassification`` architectures, ``embed`` for other encoders."""
    if config.is_encoder_decoder or config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        architectures = ", ".join(config.architectures or [config.model_type])
        raise UnsupportedModel(
            f"unsupported architecture {architectures} (model_type {config.model_type!r}): "
            "textbento serves encoder-only models (BERT, DistilBERT, RoBERTa, MPNet, ...), "
            "not decoder-only or encoder-decoder language models"
        )
    if override != "auto":
        return override  # type: ignore[return-value]
    architectures = config.architectures or []
    if any(name.endswith("ForSequenceClassification") for name in architectures):
        return "classify"
    return "embed"


def read_labels(config: PretrainedConfig) -> tuple[str, ...]:
    """The classifier's labels in logit order."""
    return tuple(str(config.id2label[index]) for index in range(config.num_labels))


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def read_sentence_transformers(model_dir: Path) -> tuple[Pooling, bool, int | None]:
    """(pooling, normalize, max_seq_length) from sentence-transformers files; defaults without them."""
    modules = _read_json(model_dir / "modules.json") or []
    pooling: Pooling = "mean"
    for module in modules:
        if module.get("type", "").endswith("models.Pooling"):
            pooling_config = _read_json(model_dir / module.get("path", "") / "config.json") or {}
            if pooling_config.get("pooling_mode_cls_token"):
                pooling = "cls"
            elif pooling_config.get("pooling_mode_max_tokens"):
                pooling = "max"
    normalize = any(module.get("type", "").endswith("models.Normalize") for module in modules)
    sbert_config = _read_json(model_dir / "sentence_bert_config.json") or {}
    return pooling, normalize, sbert_config.get("max_seq_length")


def model_max_length(config: PretrainedConfig, tokenizer_limit: int) -> int:
    """The tokenizer's limit, unless it is a placeholder larger than the position table."""
    positions = getattr(config, "max_position_embeddings", None) or 512
    return min(tokenizer_limit, positions)


def detect_spec(
    model_dir: Path,
    config: PretrainedConfig,
    tokenizer_limit: int,
    pad_id: int,
    *,
    task: str = "auto",
    source: str = "",
    revision: str | None = None,
) -> ModelSpec:
    """The full spec of the model in ``model_dir``; raises ``UnsupportedModel`` with a reason."""
    detected = detect_task(config, task)
    max_length = model_max_length(config, tokenizer_limit)
    common: dict[str, Any] = {"task": detected, "pad_id": pad_id, "source": source, "revision": revision}
    if detected == "classify":
        if task == "classify" and not any(
            name.endswith("ForSequenceClassification") for name in config.architectures or []
        ):
            raise UnsupportedModel(
                "--task classify needs a *ForSequenceClassification model; "
                f"this one is {', '.join(config.architectures or [config.model_type])}"
            )
        return ModelSpec(max_length=max_length, labels=read_labels(config), **common)
    pooling, normalize, sbert_max_length = read_sentence_transformers(model_dir)
    return ModelSpec(
        max_length=min(sbert_max_length or max_length, max_length),
        pooling=pooling,
        normalize=normalize,
        dimensions=config.hidden_size,
        **common,
    )
