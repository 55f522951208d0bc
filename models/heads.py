"""The torch modules a task's graph computes on top of a transformers model: its one output the backends
use, SPLADE's pooling on a masked LM, and a multi-vector (ColBERT) model's projected, unit-length token vectors.

One place for the exporter (which traces them) and the torch backend (which serves them), so that the two
cannot compute different answers; each task (``models.tasks``) says which of them is its graph.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedModel

from .postprocess import load_dense
from .spec import ModelSpec

TORCH_ACTIVATIONS = {"identity": torch.nn.Identity, "tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "sigmoid": torch.nn.Sigmoid}


class SingleOutput(torch.nn.Module):
    """A transformers model called with ids and mask, returning only the tensor the backends use.

    Exporting the bare model would also export its pooler (never used here) and a dict output.
    """

    def __init__(self, model: torch.nn.Module, output: str) -> None:
        super().__init__()
        self.model = model
        self.output = output

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        # DistilBERT and others have no token types and refuse the argument, even as None.
        types = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask, **types), self.output)


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
