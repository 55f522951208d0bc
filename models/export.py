"""Stored model → ONNX files inside the same BentoML model directory.

Everything lands in ``<model dir>/onnx/`` (``models.onnx_layout``): ``model.onnx`` (fp32),
``model-int8.onnx`` (per-token dynamic int8 of it, ``models.quantize``) and ``model-fp16.onnx``
(fp16 weights and compute, float32 output, for CUDA).

Every graph takes ``input_ids`` and ``attention_mask`` (int64, ``[batch, sequence]``, both axes
dynamic) and has one output: ``logits`` ``[batch, labels]`` for classifiers, ``last_hidden_state``
``[batch, sequence, dim]`` for embedders. Pooling stays out of the graph: ``models.postprocess``
pools for every backend; measured on all-MiniLM-L6-v2 it costs 0.3-0.6% of the forward pass
(0.02 of 3.2 ms for one short text, 0.7 of 221 ms for 64), and pooling inside the graph was
within noise of it.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import torch
from transformers import AutoModel, AutoModelForSequenceClassification

from .onnx_layout import FP16, FP32, INPUTS, INT8, TOKEN_TYPES, onnx_dir
from .quantize import quantize_fp16, quantize_int8
from .spec import ModelSpec

progress = logging.getLogger("textbento.import")

# One warning per torchvision operator on every export ("torchvision is not installed"): not used here.
logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)


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


def output_name(spec: ModelSpec) -> str:
    """The graph's one output: what the backends post-process for this task."""
    return "logits" if spec.task == "classify" else "last_hidden_state"


def export_fp32(model_dir: str | Path, spec: ModelSpec, target: Path) -> Path:
    """The fp32 ONNX graph of the ``save_pretrained`` model in ``model_dir``, with dynamic batch and sequence.

    The TorchScript exporter (``dynamo=False``), with eager attention. It is deprecated in torch
    2.13 but still the faster graph on ONNX Runtime's CPU kernels, measured side by side on
    all-MiniLM-L6-v2, length-sorted batches of 32, 2 threads (``python -m bench.quantization``,
    docs/design.md 5): fp32 979 vs 811 sentences/s for the dynamo exporter's graph, per-token
    int8 1,921 vs 1,403. ONNX Runtime's transformer fusions (fused ``Attention``) made it slower.
    """
    model_class = AutoModelForSequenceClassification if spec.task == "classify" else AutoModel
    model = model_class.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="eager").eval()
    # Distinct example tensors, one row padded, so that the mask is really used.
    input_ids = torch.arange(100, 116, dtype=torch.int64).reshape(2, 8)
    attention_mask = torch.ones(2, 8, dtype=torch.int64)
    attention_mask[1, 5:] = 0
    inputs = (*INPUTS, TOKEN_TYPES) if spec.token_types else INPUTS
    examples = (input_ids, attention_mask, (input_ids % 2)) if spec.token_types else (input_ids, attention_mask)
    axes = {name: {0: "batch", 1: "sequence"} for name in (*inputs, output_name(spec))}
    if spec.task == "classify":
        axes[output_name(spec)] = {0: "batch"}
    target.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # export-time deprecation chatter from torch and transformers
        torch.onnx.export(
            SingleOutput(model, output_name(spec)),
            examples,
            str(target),
            dynamo=False,
            input_names=list(inputs),
            output_names=[output_name(spec)],
            dynamic_axes=axes,
            opset_version=17,
        )
    return target


def export_model(model_dir: str | Path, spec: ModelSpec) -> list[Path]:
    """Writes the fp32, int8 and fp16 graphs into ``<model_dir>/onnx/``; returns their paths."""
    directory = onnx_dir(model_dir)
    progress.info("exporting the fp32 ONNX graph")
    fp32 = export_fp32(model_dir, spec, directory / FP32)
    progress.info("quantizing to per-token int8 (CPU)")
    int8 = quantize_int8(fp32, directory / INT8)
    progress.info("converting to fp16 (CUDA)")
    return [fp32, int8, quantize_fp16(fp32, directory / FP16)]
