"""ONNX Runtime's stock dynamic int8, the peer's kind and never served: one activation scale per tensor, so a
text's vector depends on its batch mates. ``tests/test_onnx.py`` shows it missing the gate (docs/design.md 5)."""

from __future__ import annotations

from pathlib import Path

from models.onnx_layout import external_data


def quantize_int8_per_tensor(source: Path, target: Path) -> Path:
    """``source`` (an fp32 graph) quantized to ``target`` with per-channel int8 weights and per-tensor activations."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        source,
        target,
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=["MatMul"],
        use_external_data_format=external_data(source).is_file(),
        # The fused graph's contrib ops defeat the quantizer's shape inference; their outputs are float.
        extra_options={"DefaultTensorType": TensorProto.FLOAT},
    )
    return target
