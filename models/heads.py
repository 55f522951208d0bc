"""The torch model a task runs: the transformers class that loads it, SPLADE's pooling on an MLM, and
a multi-vector (ColBERT) model's projected, unit-length token vectors.

One place for the store (which saves it), the exporter (which traces it) and the torch backend
(which serves it), so the three cannot load different heads.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification, PreTrainedModel

from .postprocess import load_dense
from .spec import ModelSpec, Task

MODEL_CLASSES = {
    "classify": AutoModelForSequenceClassification,
    "embed": AutoModel,
    "sparse": AutoModelForMaskedLM,
    "multivector": AutoModel,
}
TORCH_ACTIVATIONS = {"identity": torch.nn.Identity, "tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "sigmoid": torch.nn.Sigmoid}


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


class TokenVectors(torch.nn.Module):
    """Ids and mask → ``[rows, tokens, dim]`` unit-length token vectors, as PyLate's ColBERT computes them:
    the encoder's last hidden state through the Dense layers (``dense.npz``), each token L2-normalised.

    A mask value of ``UNATTENDED`` (``models.batching``) marks a query's expansion tokens: their vectors are
    computed, but no token attends to them, as PyLate's attention mask of 0 on them does. Projected here, so
    that ``[rows, tokens, dim]`` leaves the model (and the ONNX graph) rather than the wider hidden states.
    """

    def __init__(self, model: PreTrainedModel, spec: ModelSpec, model_dir: str | Path) -> None:
        super().__init__()
        self.model = model  # ``.model``, as ``export.SingleOutput``: ``check_traced`` reads its vocabulary
        layers = []
        for weight, bias, activation in load_dense(model_dir, spec.dense):
            linear = torch.nn.Linear(weight.shape[1], weight.shape[0])
            with torch.no_grad():
                linear.weight.copy_(torch.from_numpy(weight))
                linear.bias.copy_(torch.from_numpy(bias))
            layers += [linear, TORCH_ACTIVATIONS[activation]()]
        self.dense = torch.nn.Sequential(*layers).to(dtype=model.dtype, device=model.device)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        types = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        attended = (attention_mask == 1).to(attention_mask.dtype)
        hidden = self.model(input_ids=input_ids, attention_mask=attended, **types).last_hidden_state
        return torch.nn.functional.normalize(self.dense(hidden), p=2, dim=-1)


def task_module(model: PreTrainedModel, spec: ModelSpec, model_dir: str | Path) -> torch.nn.Module | None:
    """What a task computes on top of the transformers model inside it (and inside its ONNX graph): SPLADE's
    pooled weights, a multi-vector model's token vectors; None where the backends post-process the model's output."""
    if spec.task == "sparse":
        return SpladeEncoder(model, spec).eval()
    if spec.task == "multivector":
        return TokenVectors(model, spec, model_dir).eval()
    return None
