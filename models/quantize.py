"""fp32 ONNX graph → the int8 (CPU) and fp16 (CUDA) graphs served by the ONNX backend.

int8 is ONNX Runtime's dynamic quantization of every weight MatMul: int8 weights with one scale
per output channel, activations quantized at run time. Measured on all-MiniLM-L6-v2 (240 varied
texts, cosine to fp32; docs/design.md section 5 has the full table):

- per-tensor weights: mean 0.95, min 0.88; per-channel (kept): mean 0.993, min 0.985, 1.5x fp32;
- per-channel with the feed-forward down-projections left in fp32: mean 0.997, min 0.992, but
  only 1.3x fp32: the fallback if a model misses the accuracy gates;
- static quantization (calibrated, fixed activation scales): mean 0.75-0.99.

Dynamic activation scales are computed over the whole input tensor, so in a batch a text's result
would depend on the other texts (cosine 0.98 alone vs in a batch of 32); the ONNX backend runs
every text alone on CPU (``OnnxBackend``), which also measured faster.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers.float16 import convert_float_to_float16


def without_weight_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without ``value_info`` entries for initializers.

    The dynamo exporter lists weights there too; the quantizer's shape inference then fails on
    DistilBERT ("Inferred shape and existing shape differ in dimension 0: (64) vs (2)").
    """
    weights = {initializer.name for initializer in model.graph.initializer}
    kept = [info for info in model.graph.value_info if info.name not in weights]
    del model.graph.value_info[:]
    model.graph.value_info.extend(kept)
    return model


@contextmanager
def no_preprocess_advice() -> Iterator[None]:
    """Drops ONNX Runtime's advice to run ``quant_pre_process`` first, logged on every call.

    Its symbolic shape inference fails on these graphs ("Incomplete symbolic shape inference"),
    and the graph optimizations it would add run anyway when a session loads the model.
    """
    def advice(record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()

    logging.getLogger().addFilter(advice)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(advice)


def quantize_int8(source: Path, target: Path) -> Path:
    """Dynamic int8 of every weight MatMul, with per-channel weight scales."""
    with no_preprocess_advice():
        quantize_dynamic(
            without_weight_shapes(onnx.load(str(source))),
            target,
            weight_type=QuantType.QInt8,
            per_channel=True,
            # Embedding tables (Gather) stay fp32: lookups cost nothing, quantizing them only loses accuracy.
            op_types_to_quantize=["MatMul"],
        )
    return target


def quantize_fp16(source: Path, target: Path) -> Path:
    """fp16 weights and compute for CUDA; inputs stay int64 and the output float32."""
    model = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
    onnx.save(model, str(target))
    return target
