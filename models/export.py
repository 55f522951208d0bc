"""Stored model → ONNX files inside the same BentoML model directory.

Everything lands in ``<model dir>/onnx/`` (``models.onnx_layout``): ``model.onnx`` (fp32, with
ONNX Runtime's transformer fusions), ``model-int8.onnx`` (per-token dynamic int8 of that graph,
``models.quantize``) and ``model-fp16.onnx`` (fp16 weights and compute, float32 output, for CUDA).

Every graph takes ``input_ids`` and ``attention_mask`` (int64, ``[batch, sequence]``, both axes
dynamic) and has one output: ``logits`` ``[batch, labels]`` for classifiers, ``last_hidden_state``
``[batch, sequence, dim]`` for embedders. Pooling stays out of the graph: ``models.postprocess``
pools for every backend; measured on all-MiniLM-L6-v2 it costs 0.3-0.6% of the forward pass
(0.02 of 3.2 ms for one short text, 0.7 of 221 ms for 64), and pooling inside the graph was
within noise of it.
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch
from transformers import AutoModel, AutoModelForSequenceClassification

from .onnx_layout import FP16, FP32, INPUTS, INT8, onnx_dir
from .quantize import quantize_fp16, quantize_int8
from .spec import ModelSpec

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

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask), self.output)


def output_name(spec: ModelSpec) -> str:
    """The graph's one output: what the backends post-process for this task."""
    return "logits" if spec.task == "classify" else "last_hidden_state"


def export_plain(model_dir: str | Path, spec: ModelSpec, target: Path) -> Path:
    """The unfused fp32 ONNX graph of the ``save_pretrained`` model in ``model_dir``, with dynamic batch and sequence.

    The TorchScript exporter, with eager attention: ONNX Runtime's transformer optimizer fuses
    the attention of its graphs (``fuse``), not of the dynamo exporter's (measured in torch 2.13:
    no ``Attention`` node from either of its attention implementations). It is deprecated, and
    the fused graph is 1.2x faster on CPU (docs/design.md, 5); when it goes, so does the fusion.
    """
    model_class = AutoModelForSequenceClassification if spec.task == "classify" else AutoModel
    model = model_class.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="eager").eval()
    # Distinct example tensors, one row padded, so that the mask is really used.
    input_ids = torch.arange(100, 116, dtype=torch.int64).reshape(2, 8)
    attention_mask = torch.ones(2, 8, dtype=torch.int64)
    attention_mask[1, 5:] = 0
    axes = {name: {0: "batch", 1: "sequence"} for name in (*INPUTS, output_name(spec))}
    if spec.task == "classify":
        axes[output_name(spec)] = {0: "batch"}
    target.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # export-time deprecation chatter from torch and transformers
        torch.onnx.export(
            SingleOutput(model, output_name(spec)),
            (input_ids, attention_mask),
            str(target),
            dynamo=False,
            input_names=list(INPUTS),
            output_names=[output_name(spec)],
            dynamic_axes=axes,
            opset_version=17,
        )
    return target


def fuse(plain: Path, model_dir: str | Path, target: Path) -> Path:
    """ONNX Runtime's transformer fusions (attention, embedding and skip layer norms, bias GELU) of ``plain``.

    Only the portable graph rewrites (``opt_level=0``); a session applies the hardware-specific
    ones when it loads the graph. Fused attention skips the transposes and per-head MatMuls
    of the plain graph and takes the padding mask itself.
    """
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(model_dir))
    heads, hidden = getattr(config, "num_attention_heads", 0), getattr(config, "hidden_size", 0)
    with quiet_optimizer():
        optimized = optimize_model(str(plain), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0)
    optimized.save_model_to_file(str(target))
    return target


@contextmanager
def quiet_optimizer() -> Iterator[None]:
    """The optimizer logs every fusion it tries at INFO/WARNING; its results are checked by the tests instead."""
    names = ("onnxruntime.transformers", "fusion_base", "onnx_model", "fusion_utils")
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def export_model(model_dir: str | Path, spec: ModelSpec) -> list[Path]:
    """Writes the fp32, int8 and fp16 graphs into ``<model_dir>/onnx/``; returns their paths.

    fp32 and int8 are fused for ONNX Runtime's CPU kernels; fp16 (CUDA) is converted from the
    plain graph, whose standard ops every execution provider runs.
    """
    directory = onnx_dir(model_dir)
    with tempfile.TemporaryDirectory() as scratch:
        plain = export_plain(model_dir, spec, Path(scratch) / "plain.onnx")
        fp32 = fuse(plain, model_dir, directory / FP32)
        return [fp32, quantize_int8(fp32, directory / INT8), quantize_fp16(plain, directory / FP16)]
