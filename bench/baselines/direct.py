"""What users write without textbento: transformers called directly on the same stored model.

Shared by the three baselines so they differ only in how they serve, not in what they compute.
"""

from __future__ import annotations

import os
from typing import Any

import bentoml
import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from models.spec import ModelSpec


class Direct:
    """Tokenizer and model loaded once; ``embed``/``classify`` pad to the longest text in the request."""

    def __init__(self) -> None:
        stored = bentoml.models.get(os.environ.get("TEXTBENTO_MODEL", "text-model:latest"))
        self.spec = ModelSpec.of(stored)
        self.tokenizer = AutoTokenizer.from_pretrained(stored.path)
        model_class = AutoModelForSequenceClassification if self.spec.task == "classify" else AutoModel
        self.model = model_class.from_pretrained(stored.path).eval()

    @torch.inference_mode()
    def _forward(self, texts: list[str], pairs: list[str] | None = None) -> tuple[Any, Any]:
        batch = self.tokenizer(texts, pairs, padding=True, truncation=True, max_length=self.spec.max_length, return_tensors="pt")
        return self.model(**batch), batch["attention_mask"]

    def embed(self, texts: list[str]) -> dict:
        outputs, mask = self._forward(texts)
        mask = mask.unsqueeze(-1).float()
        vectors = torch.nn.functional.normalize((outputs.last_hidden_state * mask).sum(1) / mask.sum(1), dim=-1)
        return {"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors.tolist())]}

    def rerank(self, query: str, documents: list[str]) -> dict:
        """A cross-encoder's sigmoid score per (query, document), best first."""
        outputs, _ = self._forward([query] * len(documents), documents)
        scores = outputs.logits[:, 0].sigmoid().tolist()
        order = sorted(range(len(documents)), key=lambda index: -scores[index])
        return {"results": [{"index": i, "relevance_score": scores[i]} for i in order]}

    def classify(self, texts: list[str]) -> dict:
        outputs, _ = self._forward(texts)
        scores, labels = outputs.logits.softmax(-1).max(-1)
        return {
            "data": [
                {"index": i, "label": self.spec.labels[label], "score": s}
                for i, (s, label) in enumerate(zip(scores.tolist(), labels.tolist()))
            ]
        }
