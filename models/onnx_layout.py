"""Where a stored model keeps its ONNX graphs: written by ``models.export``, read by the ONNX backend.

A module of its own so that a runner serving ONNX never imports torch or the exporter.
"""

from __future__ import annotations

from pathlib import Path

ONNX_DIR = "onnx"
FP32 = "model.onnx"  # the ``onnx`` backend on CPU
INT8 = "model-int8.onnx"  # the ``onnx-int8`` backend (CPU only)
FP16 = "model-fp16.onnx"  # the ``onnx`` backend on CUDA
INPUTS = ("input_ids", "attention_mask")  # int64, [batch, sequence]
TOKEN_TYPES = "token_type_ids"  # a third input, for classifiers with ``ModelSpec.token_types``


def onnx_dir(model_dir: str | Path) -> Path:
    """The directory of a stored model's ONNX graphs."""
    return Path(model_dir) / ONNX_DIR


def has_onnx(model_dir: str | Path) -> bool:
    """Whether the stored model carries its ONNX graphs."""
    return (onnx_dir(model_dir) / FP32).is_file()
