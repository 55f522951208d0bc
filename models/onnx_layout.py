"""Where a stored model keeps its ONNX graphs: written by ``models.export``, read by the ONNX backend.

A graph whose weights pass ``SINGLE_FILE_LIMIT`` keeps them in one side file next to it
(``<graph>.data``, ONNX's external data), in the same directory, so that they travel with the model
into bentos and ONNX Runtime finds them when it loads the graph from its path.

A module of its own so that an Encoder serving ONNX never imports torch or the exporter.
"""

from __future__ import annotations

from pathlib import Path

ONNX_DIR = "onnx"
FP32 = "model.onnx"  # the ``onnx`` backend on CPU
INT8 = "model-int8.onnx"  # the ``onnx-int8`` backend (CPU only)
FP16 = "model-fp16.onnx"  # the ``onnx`` backend on CUDA
INPUTS = ("input_ids", "attention_mask")  # int64, [batch, sequence]
TOKEN_TYPES = "token_type_ids"  # a third input, for classifiers with ``ModelSpec.token_types``
# Protobuf cannot serialize a message past 2 GiB; 128 MiB of it is left for the nodes, names and shapes.
SINGLE_FILE_LIMIT = 2**31 - 2**27


def onnx_dir(model_dir: str | Path) -> Path:
    """The directory of a stored model's ONNX graphs."""
    return Path(model_dir) / ONNX_DIR


def has_onnx(model_dir: str | Path) -> bool:
    """Whether the stored model carries its ONNX graphs."""
    return (onnx_dir(model_dir) / FP32).is_file()


def external_data(graph: Path) -> Path:
    """The side file that holds the weights of ``graph`` when they are too large for one protobuf."""
    return graph.with_name(graph.name + ".data")
