"""The torch model a task runs: the transformers class that loads it, and SPLADE's pooling on an MLM.

One place for the store (which saves it), the exporter (which traces it) and the torch backend
(which serves it), so the three cannot load different heads.
"""

from __future__ import annotations

import torch
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification, PreTrainedModel

from .spec import ModelSpec, Task

MODEL_CLASSES = {"classify": AutoModelForSequenceClassification, "embed": AutoModel, "sparse": AutoModelForMaskedLM}


def model_class(task: Task) -> type:
    """The transformers auto class whose ``from_pretrained`` loads a model of ``task`` with its head."""
    return MODEL_CLASSES[task]


class SpladeEncoder(torch.nn.Module):
    """Ids and mask → ``[rows, vocabulary]`` SPLADE weights, as sentence-transformers' SpladePooling.

    Per vocabulary id: ``log1p(relu(logit × mask))`` (``log1p`` twice for ``log1p_relu``), pooled
    over the row's tokens by max or sum. Padding contributes 0, which pools to nothing: every weight
    is ≥ 0. Pooled here so that only ``[rows, vocabulary]`` leaves the model (and the ONNX graph),
    never the ``[rows, tokens, vocabulary]`` logits.
    """

    def __init__(self, model: PreTrainedModel, spec: ModelSpec) -> None:
        super().__init__()
        self.model = model  # ``.model``, as ``export.SingleOutput``: ``check_traced`` reads its vocabulary
        self.pooling = spec.sparse_pooling
        self.twice = spec.sparse_activation == "log1p_relu"

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        types = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, **types).logits
        weights = torch.log1p(torch.relu(logits * attention_mask.unsqueeze(-1).to(logits.dtype)))
        if self.twice:
            weights = torch.log1p(weights)
        return weights.amax(dim=1) if self.pooling == "max" else weights.sum(dim=1)
