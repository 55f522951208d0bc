"""Inference backends: padded token ids in, logits (classifiers) or sentence embeddings (embedders) out.

``torch`` runs the transformers model; ``onnx`` and ``onnx-int8`` run the graphs that
``models.export`` wrote into the stored model (fp32 or fp16 on CUDA, and dynamic int8 on CPU).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from ..spec import ModelSpec


class Backend(Protocol):
    """A loaded model on one device.

    ``forward`` takes right-padded ``[rows, width]`` int64 ids and mask and returns ``[rows, labels]``
    logits or ``[rows, dim]`` embeddings as float32, one row per input row.
    """

    name: str
    device: str

    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray: ...


BACKENDS = ("torch", "onnx", "onnx-int8")


def load_backend(name: str, model_dir: str | Path, spec: ModelSpec, threads: int) -> Backend:
    """The backend called ``name`` with the model in ``model_dir`` loaded and ready."""
    if name == "torch":
        from .torch_backend import TorchBackend

        return TorchBackend(model_dir, spec, threads)
    if name in ("onnx", "onnx-int8"):
        from .onnx_backend import OnnxBackend

        return OnnxBackend(model_dir, spec, threads, quantized=name == "onnx-int8")
    raise ValueError(f"unknown backend {name!r}; expected one of {BACKENDS}")
