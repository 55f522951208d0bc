"""fp32 ONNX graph → the int8 (CPU) and fp16 (CUDA) graphs served by the ONNX backend.

int8 is *per-token* dynamic quantization: every weight MatMul gets int8 weights with one scale
per output channel, and its input is quantized at run time with one scale and zero point per
token row, not one per tensor. A text's result then depends on nothing but its own tokens: not
on its batch mates, not on padding, so batches can be padded and length-sorted like fp32 ones.

ONNX Runtime's own dynamic quantization (``quantize_dynamic``) and its fused int8 kernels take
one activation scale per tensor, and its CPU ``MatMulInteger`` one zero point; per row is written
here with standard ops and one contrib op:

    a [.., K] → rows [M, K] → per row: range → scale s, zero point z → QuantizeLinear (axis 0, uint8)
    → MatMulIntegerToFloat(rows_q, w_q, s, weight scales)   (the row scale broadcast inside the op)
    + [s·z, 1] ⊗ [−column sums of w_q; bias]                (one Gemm, K = 2, that adds in place)
    → [.., N]

The MatMul's bias ``Add`` rides in the zero points' Gemm and the row scale in the kernel, and the
MatMuls that read one input (Q, K and V; a gated FFN's gate and up) run as one, their weights side by
side and the product split after: fewer ops and passes over the outputs (docs/design.md 5).

Asymmetric rows everywhere are served: symmetric rows (zero point 128, subtracted inside the kernel) are
faster but miss the fidelity gate, and leaving Q/K/V in fp32 is more accurate but slower (docs/design.md 5
has each variant's figures, measured against torch fp32 on the gate texts of ``tests/test_onnx.py``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .onnx_layout import SINGLE_FILE_LIMIT, external_data

# GELU fused, or decomposed as exported (x · 0.5 · (1 + erf(x / √2))): its output is one-sided.
GELU_OPS = {"Gelu", "BiasGelu", "FastGelu", "QuickGelu", "Erf"}
# How each weight MatMul's input rows are quantized, by what feeds it (``PerTokenInt8.role``):
# "asymmetric", "symmetric" or "fp32" (left alone).
SERVED_POLICY = {"qkv": "asymmetric", "after_gelu": "asymmetric", "other": "asymmetric"}


# Where u8×s8 kernels saturate (no VNNI, ``models.cpu``), weights of at most 64 in magnitude cannot:
# 255 × 64 × 2 < 32,767. 7-bit weights then run the fast kernels exactly, at half the weights' precision.
INT8_LEVELS, SEVEN_BIT_LEVELS = 127, 64


def weight_int8(weight: np.ndarray, levels: int = INT8_LEVELS) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 ``[K, N]`` weights in ``[-levels, levels]`` and their float32 scale per output channel."""
    scale = np.abs(weight).max(axis=0) / float(levels)
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    return np.clip(np.round(weight / scale), -levels, levels).astype(np.int8), scale


class PerTokenInt8:
    """Rewrites the weight MatMuls of one graph; each activation is quantized once for all its MatMuls."""

    def __init__(self, model: onnx.ModelProto, policy: dict[str, str] = SERVED_POLICY, weight_levels: dict[str, int] | None = None) -> None:
        """``policy``: how each role's input rows are quantized; ``weight_levels``: the weights' largest
        integer by role (``INT8_LEVELS`` where not given)."""
        self.model = model
        self.policy = policy
        self.weight_levels = weight_levels or {}
        self.graph = model.graph
        self.weights = {init.name: init for init in self.graph.initializer}
        self.producer = {output: node for node in self.graph.node for output in node.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in self.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.folded: set[str] = set()  # outputs of the bias Adds folded into their MatMul's Gemm
        self.biases: set[str] = set()  # their bias initializers
        self.opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        self.constants: dict[str, onnx.TensorProto] = {}
        self.quantized: dict[str, tuple[str, str, str | None, str]] = {}
        self.shapes: set[str] = set()
        self.zero_products: dict[str, str] = {}
        self.grouped: set[str] = set()  # activations whose weight MatMuls are rewritten, as one
        self.nodes: list[onnx.NodeProto] = []

    def rewrite(self) -> onnx.ModelProto:
        replaced = set()
        for node in self.graph.node:
            if node.output[0] in self.folded:  # a bias Add, now inside its MatMul's Gemm
                continue
            role = self.role(node.input[0]) if self.weight_matmul(node) else None
            mode = self.policy[role] if role else "fp32"
            if mode == "fp32":
                self.nodes.append(node)
                continue
            replaced.add(node.input[1])
            if node.input[0] not in self.grouped:
                self.grouped.add(node.input[0])
                self.matmul(self.readers(node.input[0]), symmetric=mode == "symmetric", levels=self.weight_levels.get(role, INT8_LEVELS))
        del self.graph.node[:]
        self.graph.node.extend(self.nodes)
        used = {name for node in self.nodes for name in node.input}
        replaced |= {init.name for init in self.graph.initializer if init.name in self.biases and init.name not in used}
        kept = [init for init in self.graph.initializer if init.name not in replaced]
        del self.graph.initializer[:]
        self.graph.initializer.extend([*kept, *self.constants.values()])
        if not any(o.domain == "com.microsoft" for o in self.model.opset_import):
            self.model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        return self.model

    def const(self, name: str, value: np.ndarray | np.generic) -> str:
        if name not in self.constants:
            self.constants[name] = numpy_helper.from_array(np.asarray(value), name)
        return name

    def node(self, op: str, inputs: list[str], output: str, **attributes: object) -> str:
        domain = "com.microsoft" if op == "MatMulIntegerToFloat" else ""
        self.nodes.append(helper.make_node(op, inputs, [output], domain=domain, **attributes))
        return output

    def row_reduce(self, op: str, rows: str, output: str) -> str:
        """``[M, K]`` → ``[M]``; ``axes`` became an input in opset 18."""
        if self.opset >= 18:
            return self.node(op, [rows, self.const("q_axis1", np.array([1], np.int64))], output, keepdims=0)
        return self.node(op, [rows], output, axes=[1], keepdims=0)

    def column(self, vector: str, output: str) -> str:
        """``[M]`` → ``[M, 1]``, to scale the rows of an ``[M, N]`` product."""
        return self.node("Unsqueeze", [vector, self.const("q_axis1", np.array([1], np.int64))], output)

    def role(self, activation: str) -> str:
        """``qkv`` (feeds the three attention projections), ``after_gelu`` (FFN down) or ``other``."""
        if len(self.readers(activation)) >= 3:
            return "qkv"
        return "after_gelu" if self.after_gelu(activation) else "other"

    def after_gelu(self, activation: str, depth: int = 4) -> bool:
        """Whether ``activation`` comes out of a GELU: a GELU op within ``depth`` producers back."""
        producer = self.producer.get(activation)
        if producer is None or depth == 0:
            return False
        return producer.op_type in GELU_OPS or any(self.after_gelu(name, depth - 1) for name in producer.input)

    def rows(self, activation: str, k: int, symmetric: bool) -> tuple[str, str, str | None, str]:
        """(uint8 rows ``[M, K]``, row scales ``[M, 1]``, row zero points ``[M, 1]`` or None when 128, leading shape).

        Built once per activation, for every MatMul that reads it (Q, K and V share theirs).
        """
        if activation in self.quantized:
            return self.quantized[activation]
        p = f"q{len(self.quantized)}_"
        c = self.const
        leading = self.node(
            "Slice",
            [self.node("Shape", [activation], p + "shape"), c("q_0", np.array([0], np.int64)), c("q_-1", np.array([-1], np.int64))],
            p + "leading",
        )
        rows = self.node("Reshape", [activation, c(f"q_rows{k}", np.array([-1, k], np.int64))], p + "rows")
        tiny = c("q_tiny", np.float32(1e-12))
        if symmetric:
            largest = self.row_reduce("ReduceMax", self.node("Abs", [rows], p + "abs"), p + "largest")
            scale = self.node("Max", [self.node("Mul", [largest, c("q_1/127", np.float32(1 / 127))], p + "s"), tiny], p + "scale")
            zero_u8 = self.node("Expand", [c("q_128", np.uint8(128)), self.node("Shape", [scale], p + "m")], p + "zero_u8")
            zero = None
        else:  # the range always holds 0, so that 0 is exact, as in ONNX Runtime's DynamicQuantizeLinear
            low = self.node("Min", [self.row_reduce("ReduceMin", rows, p + "min"), c("q_0f", np.float32(0))], p + "low")
            high = self.node("Max", [self.row_reduce("ReduceMax", rows, p + "max"), c("q_0f", np.float32(0))], p + "high")
            spread = self.node("Sub", [high, low], p + "spread")
            scale = self.node("Max", [self.node("Mul", [spread, c("q_1/255", np.float32(1 / 255))], p + "s"), tiny], p + "scale")
            # round(-low / scale), saturated to uint8: the zero point, by the same op that quantizes
            zero_u8 = self.node("QuantizeLinear", [self.node("Neg", [low], p + "-low"), scale], p + "zero_u8", axis=0)
            zero = self.column(self.node("Cast", [zero_u8], p + "zero_f", to=TensorProto.FLOAT), p + "zero")
        quantized = self.node("QuantizeLinear", [rows, scale, zero_u8], p + "q", axis=0)
        self.quantized[activation] = (quantized, self.column(scale, p + "scale_column"), zero, leading)
        return self.quantized[activation]

    def bias(self, node: onnx.NodeProto, n: int) -> tuple[str, np.ndarray] | None:
        """The ``Add`` of a constant ``[n]`` bias that alone reads ``node``'s output, and that bias; else None."""
        readers = self.consumers.get(node.output[0], [])
        if len(readers) != 1 or readers[0].op_type != "Add":
            return None
        others = [name for name in readers[0].input if name != node.output[0]]
        bias = self.weights.get(others[0]) if len(others) == 1 else None
        if bias is None or tuple(bias.dims) != (n,):
            return None
        self.biases.add(bias.name)
        return readers[0].output[0], numpy_helper.to_array(bias).astype(np.float32)

    def zero_rows(self, activation: str, scale: str, zero: str, with_ones: bool) -> str:
        """``[M, 1]`` of s·z, or ``[M, 2]`` of s·z and 1 (the bias's row): the left side of the zero points' Gemm."""
        key = f"{activation}#{with_ones}"
        if key not in self.zero_products:
            p = f"q{len(self.zero_products)}_z_"
            scaled = self.node("Mul", [zero, scale], p + "scaled")
            one_column = self.const("q_pad_ones", np.array([0, 0, 0, 1], np.int64))  # a column after the last, of ones
            ones = self.const("q_1f", np.float32(1))
            self.zero_products[key] = self.node("Pad", [scaled, one_column, ones], p + "ones") if with_ones else scaled
        return self.zero_products[key]

    def weight_matmul(self, node: onnx.NodeProto) -> bool:
        """A MatMul of its input by a stored 2-D weight: what the rewrite quantizes."""
        return node.op_type == "MatMul" and node.input[1] in self.weights and len(self.weights[node.input[1]].dims) == 2

    def readers(self, activation: str) -> list[onnx.NodeProto]:
        """The weight MatMuls that read ``activation`` (Q, K and V read one): rewritten as one MatMul."""
        return [node for node in self.consumers[activation] if node.input[0] == activation and self.weight_matmul(node)]

    def matmul(self, group: list[onnx.NodeProto], symmetric: bool, levels: int) -> None:
        """The MatMuls of ``group`` (one input), as one: their weights side by side, the product split after."""
        first = group[0]
        p = f"{first.name or first.output[0]}_int8_"
        c = self.const
        quantized_weights = [weight_int8(numpy_helper.to_array(self.weights[node.input[1]]), levels) for node in group]
        w_q = np.concatenate([w for w, _ in quantized_weights], axis=1)
        w_scale = np.concatenate([scale for _, scale in quantized_weights])
        (k, n), widths = w_q.shape, [w.shape[1] for w, _ in quantized_weights]
        quantized, scale, zero, leading = self.rows(first.input[0], k, symmetric)
        kernel_inputs = [quantized, c(p + "w", w_q), scale, c(p + "w_scale", w_scale)]
        outputs = [node.output[0] for node in group]
        if zero is None:
            product = self.node("MatMulIntegerToFloat", [*kernel_inputs, c("q_128", np.uint8(128))], p + "product")
        else:  # s·raw + [s·z, 1] ⊗ [−column sums; biases], one Gemm (K = 1 or 2) that adds to s·raw in place
            terms = -(w_q.astype(np.int64).sum(axis=0) * w_scale).astype(np.float32)[None, :]
            biased = [self.bias(node, width) for node, width in zip(group, widths)]
            if any(biased):
                outputs = [found[0] if found else output for found, output in zip(biased, outputs)]
                self.folded.update(found[0] for found in biased if found)
                biases = [found[1] if found else np.zeros(width, np.float32) for found, width in zip(biased, widths)]
                terms = np.concatenate([terms, np.concatenate(biases)[None, :]])
            raw = self.node("MatMulIntegerToFloat", kernel_inputs, p + "raw")
            left = self.zero_rows(first.input[0], scale, zero, with_ones=any(biased))
            product = self.node("Gemm", [left, c(p + "zero_terms", terms), raw], p + "product")
        shape = f"{leading}_{n}"
        if shape not in self.shapes:
            self.shapes.add(self.node("Concat", [leading, c(f"q_n{n}", np.array([n], np.int64))], shape, axis=0))
        if len(group) == 1:
            self.node("Reshape", [product, shape], outputs[0])
            return
        joined = self.node("Reshape", [product, shape], p + "joined")
        if self.opset >= 13:  # the sizes became an input in opset 13
            split = c("q_split_" + "_".join(map(str, widths)), np.array(widths, np.int64))
            self.nodes.append(helper.make_node("Split", [joined, split], outputs, axis=-1))
        else:
            self.nodes.append(helper.make_node("Split", [joined], outputs, axis=-1, split=widths))


def weight_bytes(model: onnx.ModelProto) -> int:
    """What the graph's initializers hold: elements × bytes per element (``ByteSize`` serializes, and fails past 2 GiB)."""
    return sum(math.prod(init.dims) * helper.tensor_dtype_to_np_dtype(init.data_type).itemsize for init in model.graph.initializer)


def save_graph(model: onnx.ModelProto, target: Path, single_file_limit: int = SINGLE_FILE_LIMIT) -> Path:
    """``model`` written to ``target``: one file, or with its weights in ``external_data(target)`` past ``single_file_limit`` bytes."""
    side_file = external_data(target)
    side_file.unlink(missing_ok=True)  # onnx appends to an existing one
    too_large = weight_bytes(model) > single_file_limit
    onnx.save_model(model, str(target), save_as_external_data=too_large, location=side_file.name)
    return target


def quantize_int8(
    source: Path, target: Path, policy: dict[str, str] = SERVED_POLICY, *, single_file_limit: int = SINGLE_FILE_LIMIT
) -> Path:
    """The per-token int8 graph of the fp32 graph at ``source``."""
    return save_graph(PerTokenInt8(onnx.load(str(source)), policy).rewrite(), target, single_file_limit)


def unsigned_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same int8 graph with its weights stored as uint8 (+ 128, zero point 128): u8×u8 kernels.

    The values the kernel multiplies are unchanged (it subtracts the zero point 128 again), so the
    result is the graph's exact arithmetic on every CPU, while ONNX Runtime's u8×s8 kernels
    saturate where there is no VNNI (``models.cpu``). Done at load, not stored: a model imported
    on one machine is served on others, and the stored graph stays the one fast on VNNI. Weights
    within ``SEVEN_BIT_LEVELS`` cannot saturate those kernels and stay int8, on the faster ones.
    """
    weights = {init.name: init for init in model.graph.initializer}
    zero, shifted_any = "q_128_weights", False
    for node in model.graph.node:
        weight = weights.get(node.input[1]) if node.op_type == "MatMulIntegerToFloat" else None
        if weight is None or weight.data_type != TensorProto.INT8:
            continue
        signed = numpy_helper.to_array(weight).astype(np.int16)
        if np.abs(signed).max() <= SEVEN_BIT_LEVELS:
            continue
        shifted = (signed + 128).astype(np.uint8)
        weight.CopyFrom(numpy_helper.from_array(shifted, weight.name))
        inputs = list(node.input) + [""] * (6 - len(node.input))  # A, B, a_scale, b_scale, a_zero_point, b_zero_point
        inputs[5] = zero
        del node.input[:]
        node.input.extend(inputs)
        shifted_any = True
    if shifted_any:  # only where used: ONNX Runtime warns of an unused initializer
        model.graph.initializer.append(numpy_helper.from_array(np.uint8(128), zero))
    return model


def quantize_fp16(source: Path, target: Path, *, single_file_limit: int = SINGLE_FILE_LIMIT) -> Path:
    """fp16 weights and compute for CUDA; inputs stay int64 and the output float32."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    # From the path, the converter infers shapes on the file (``infer_shapes_path``): in memory they
    # would be inferred on the serialized graph, which fails past 2 GiB.
    return save_graph(convert_float_to_float16(str(source), keep_io_types=True), target, single_file_limit)
