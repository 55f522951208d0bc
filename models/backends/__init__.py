"""Inference backends: padded token ids in, logits (classifiers) or sentence embeddings (embedders) out.

``torch`` runs the transformers model; ``onnx`` and ``onnx-int8`` run the graphs that
``models.export`` wrote into the stored model (fp32, or fp16 on CUDA, and per-token dynamic
int8 on CPU). Every backend runs a padded batch as one forward pass.
``auto`` picks the fastest of them that passes the accuracy gates of ``tests/test_onnx.py`` on
the device at hand.
"""

from __future__ import annotations

import importlib.util
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


BACKENDS = ("auto", "torch", "onnx", "onnx-int8")


def load_backend(name: str, model_dir: str | Path, spec: ModelSpec, threads: int) -> Backend:
    """The backend called ``name`` with the model in ``model_dir`` loaded and ready.

    ``auto``, measured on a 2-core CPU with MiniLM (bench/results/ceiling.json): the per-token
    int8 graph runs the most sentences/s and passes the accuracy gates against transformers
    (tests/test_onnx.py: min cosine 0.9925, mean 0.9987), so it is the CPU choice; on CUDA the fp16
    graph. A model stored without ONNX graphs gets torch (fp16 on CUDA) rather than a failure.
    """
    if name == "auto":
        from ..onnx_layout import has_onnx

        if not has_onnx(model_dir):
            if importlib.util.find_spec("torch") is None:  # the CPU image: ONNX Runtime only
                raise FileNotFoundError(
                    f"{model_dir} has no ONNX graphs and PyTorch is not installed; add them with: python -m train_import.export_onnx <tag>"
                )
            return load_backend("torch", model_dir, spec, threads)
        from .onnx_backend import OnnxBackend

        return OnnxBackend(model_dir, spec, threads, cpu_graph="int8")
    if name == "torch":
        from .torch_backend import TorchBackend

        return TorchBackend(model_dir, spec, threads)
    if name in ("onnx", "onnx-int8"):
        from .onnx_backend import OnnxBackend

        # The int8 graph has CPU kernels only: asking for it means the CPU even where a GPU is.
        return OnnxBackend(model_dir, spec, threads, cpu_graph="int8" if name == "onnx-int8" else "fp32", cuda=name == "onnx")
    raise ValueError(f"unknown backend {name!r}; expected one of {BACKENDS}")
