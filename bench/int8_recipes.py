"""Candidate int8 recipes against the served per-token graph, in process: faster, and as faithful?

    python -m bench.int8_recipes     # → bench/results/int8-recipes.json
    qemu-x86_64 -cpu Haswell .venv/bin/python -m bench.int8_recipes --fidelity-only --recipes ...   # AVX2's kernels, emulated

On the embedded all-MiniLM-L6-v2 and this machine's int8 kernels, each recipe (``PARTLY_FP32``, ``RECIPES``) is built from
the stored fp32 graph and measured beside the served int8 graph (``auto``'s here) and the fp32 one: a lone
text's pass and length-sorted batches of 32 short texts (``bench.ceiling``), interleaved over rounds (best of each), and
its fidelity to the fp32 graph with the gates' own measures (alone vs in sorted batches too: a recipe
must not make a text depend on its batch mates). The recipes:

- ``per-token, FFN down fp32`` and ``per-token, Q/K/V fp32``: the served recipe with its most sensitive
  MatMuls left in fp32 (the FFN's down projections read GELU's one-sided outliers), for deeper models
  whose fully quantized graph misses the gates;
- ``fused``: ONNX Runtime's offline transformer fusions (attention's core as ``MultiHeadAttention``,
  which keeps the Q, K and V projections as MatMuls; SkipLayerNorm, BiasGelu), then per-token int8;
- ``static``: ONNX Runtime's static int8 (QDQ, per-channel weights, activation ranges calibrated on 96
  other texts, min-max: the calibrators by histogram need one shape): invariant by construction, one fixed scale per activation tensor;
- ``static, FFN down fp32``: the same with the MatMuls after GELU, where the outliers are, left in fp32;
- ``per-token, 7-bit weights``: the served recipe with weights of at most 64 in magnitude (ONNX Runtime's
  ``reduce_range``), which u8×s8 kernels multiply without saturating on every class: where there is no
  VNNI, the fast kernels instead of u8×u8. ``per-token, 7-bit weights but FFN down``: the FFN's down
  projections keep 8 bits (there, on u8×u8 kernels: ``unsigned_weights`` leaves 7-bit weights signed).
- ``per-token, as rewritten now``: the served recipe as this tree's ``models.quantize`` writes it. On the graph
  stored by the same rewrite it is a control: a recipe built in the run read 1.03-1.15x the stored graph's texts/s
  (docs/design.md 5), a bias every ratio here carries; compare stored graphs with ``bench.stored_graphs``;
- ``MatMulNBits 8-bit, int8 compute, block N``: ONNX Runtime's weight-only 8-bit MatMuls (asymmetric, a scale and zero
  point per block of N along each weight column) with ``accuracy_level`` 4, where its kernels quantize each activation
  row per block of N to int8 inside the MatMul: per row, hence invariant, with no quantizing ops in the graph.

And OpenVINO's CPU plugin (``OPENVINO``, where ``openvino`` is installed), each with its own kernels and fusions:

- ``OpenVINO bf16``: the stored fp32 graph in bf16, ``auto``'s candidate where the CPU has AMX and int8 misses (docs/design.md 5c);
- ``OpenVINO int8 weights, int8 activations per group of 32``: weights stored int8 (asymmetric, per output
  channel, as ``DequantizeLinear`` before each MatMul, which OpenVINO reads as compressed weights), and its
  dynamic quantization of each activation row per group of 32 along K, on CPUs with VNNI or AMX.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from collections.abc import Callable
from pathlib import Path

import bentoml
import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.transformers.fusion_options import FusionOptions
from onnxruntime.transformers.optimizer import optimize_model
from transformers import AutoConfig

from bench.ceiling import bench_tag, best_rate, fidelity, loaded
from harness.results import write_result
from harness.texts import mixed_texts
from models.backends.onnx_backend import OnnxBackend, Streams, session_options, unsigned_int8_sessions
from models.cpu import signed_int8_is_exact
from models.inference import run_batch
from models.onnx_layout import FP32, onnx_dir
from models.quantize import SEVEN_BIT_LEVELS, PerTokenInt8, save_graph
from models.tokenization import TextTokenizer
from serving.settings import settings


def fused(fp32: Path, scratch: Path, model_dir: Path) -> Path:
    config = AutoConfig.from_pretrained(model_dir)
    options = FusionOptions("bert")
    options.use_multi_head_attention = True
    graph = optimize_model(
        str(fp32), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size,
        optimization_options=options, opt_level=1, use_gpu=False,
    )  # fmt: skip
    print("fused:", {op: count for op, count in graph.get_fused_operator_statistics().items() if count})
    return save_graph(PerTokenInt8(graph.model).rewrite(), scratch / "fused-int8.onnx")


class Calibration(CalibrationDataReader):
    """96 texts of 3-60 words (not the measured ones), one at a time, unpadded."""

    def __init__(self, model_dir: Path) -> None:
        encoded = TextTokenizer(model_dir, 256).encode(mixed_texts(96, seed=1))
        self.feeds = iter(
            {"input_ids": e.ids[None].astype(np.int64), "attention_mask": np.ones((1, len(e.ids)), np.int64)} for e in encoded
        )

    def get_next(self) -> dict | None:
        return next(self.feeds, None)


def static(fp32: Path, scratch: Path, model_dir: Path, exclude_after_gelu: bool = False) -> Path:
    model = onnx.load(str(fp32))
    excluded = []
    if exclude_after_gelu:
        rewriter = PerTokenInt8(model)  # its roles, not its rewrite
        excluded = [node.name for node in model.graph.node if rewriter.weight_matmul(node) and rewriter.role(node.input[0]) == "after_gelu"]
    target = scratch / f"static-{len(excluded)}.onnx"
    quantize_static(
        str(fp32), str(target), Calibration(model_dir), quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"],
        per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, nodes_to_exclude=excluded,
        calibrate_method=CalibrationMethod.MinMax, extra_options={"MatMulConstBOnly": True},
    )  # fmt: skip
    return target


def weight_only_int8(fp32: Path, scratch: Path, block: int) -> Path:
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=False, accuracy_level=4, bits=8)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(fp32)), algo_config=config)
    quantizer.process()
    target = scratch / f"nbits-8-{block}.onnx"
    quantizer.model.save_model_to_file(str(target))
    return target


def seven_bit(fp32: Path, scratch: Path, roles: tuple[str, ...]) -> Path:
    levels = dict.fromkeys(roles, SEVEN_BIT_LEVELS)
    return save_graph(PerTokenInt8(onnx.load(str(fp32)), weight_levels=levels).rewrite(), scratch / f"7-bit-{len(roles)}.onnx")


def int8_weights(fp32: Path, scratch: Path, _: Path) -> Path:
    """The fp32 graph with each weight MatMul's weights int8 behind a ``DequantizeLinear`` (uint8, a scale and zero
    point per output column): what OpenVINO's CPU plugin takes for compressed weights."""
    model = onnx.load(str(fp32))
    weights = {tensor.name: tensor for tensor in model.graph.initializer if len(tensor.dims) == 2}
    nodes = []
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.input[1] in weights:
            name = node.input[1]
            w = onnx.numpy_helper.to_array(weights[name])  # [K, N]
            low, high = np.minimum(w.min(0), 0), np.maximum(w.max(0), 0)
            scale = np.maximum(high - low, 1e-12) / 255
            zero = np.clip(np.round(-low / scale), 0, 255).astype(np.uint8)
            q = np.clip(np.round(w / scale) + zero, 0, 255).astype(np.uint8)
            model.graph.initializer.remove(weights[name])
            stored = [(q, f"{name}_q"), (scale.astype(np.float32), f"{name}_scale"), (zero, f"{name}_zero")]
            model.graph.initializer.extend(onnx.numpy_helper.from_array(array, label) for array, label in stored)
            nodes.append(onnx.helper.make_node("DequantizeLinear", [label for _, label in stored], [name], axis=1))
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return save_graph(model, scratch / "int8-weights.onnx")


# OpenVINO recipes: (the graph, None for the stored fp32 one; the compile hints).
OPENVINO: dict[str, tuple[Callable[[Path, Path, Path], Path] | None, dict[str, object]]] = {
    "OpenVINO bf16": (None, {"INFERENCE_PRECISION_HINT": "bf16"}),
    "OpenVINO int8 weights, int8 activations per group of 32": (
        int8_weights,
        {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 32},
    ),
}
# Built as ``auto`` builds its fallback (``OnnxBackend(fp32_roles=...)``), by the roles left in fp32.
PARTLY_FP32 = {"per-token, FFN down fp32": ("after_gelu",), "per-token, Q/K/V fp32": ("qkv",)}
RECIPES: dict[str, Callable[[Path, Path, Path], Path]] = {
    "fused": fused,
    "static": static,
    "static, FFN down fp32": lambda fp32, scratch, model_dir: static(fp32, scratch, model_dir, exclude_after_gelu=True),
    "per-token, 7-bit weights": lambda fp32, scratch, _: seven_bit(fp32, scratch, ("qkv", "after_gelu", "other")),
    "per-token, 7-bit weights but FFN down": lambda fp32, scratch, _: seven_bit(fp32, scratch, ("qkv", "other")),
    "per-token, as rewritten now": lambda fp32, scratch, _: save_graph(PerTokenInt8(onnx.load(str(fp32))).rewrite(), scratch / "now.onnx"),
    **{
        f"MatMulNBits 8-bit, int8 compute, block {block}": lambda fp32, scratch, _, block=block: weight_only_int8(fp32, scratch, block)
        for block in (32, 128)
    },
}
# Graphs whose int8 kernels ONNX Runtime picks inside one op, by the CPU: not rewritten for u8×u8 where u8×s8 is inexact.
KERNELS_CHOSEN_INSIDE = ("MatMulNBits",)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--recipes", nargs="+", choices=[*PARTLY_FP32, *RECIPES, *OPENVINO], help="these only (default: all)")
    parser.add_argument(
        "--fidelity-only", action="store_true", help="no timings (under an emulator): → bench/results/int8-recipes-fidelity.json"
    )
    parser.add_argument("--output", help="the result file's name (default: int8-recipes.json, or -subset.json with --recipes)")
    args = parser.parse_args()
    chosen = args.recipes or [*PARTLY_FP32, *RECIPES, *(OPENVINO if importlib.util.find_spec("openvino") else ())]
    tag = bench_tag()
    model_dir = Path(bentoml.models.get(tag).path)
    reference_backend, spec, ids = loaded("onnx", tag)
    reference = np.stack([run_batch(reference_backend, [one], spec.pad_id, settings.token_budget)[0] for one in ids[:256]])
    threads = settings.runner_threads
    counts = [1, threads] if threads > 1 else [1]
    graphs = {"served": loaded("onnx-int8", tag)[0], "fp32": reference_backend}
    for name in chosen:
        if name in PARTLY_FP32:
            graphs[name] = OnnxBackend(model_dir, spec, threads, cpu_graph="int8", cuda=False, fp32_roles=PARTLY_FP32[name])
    with tempfile.TemporaryDirectory() as scratch:
        for name in [name for name in chosen if name in RECIPES]:
            graph = RECIPES[name](onnx_dir(model_dir) / FP32, Path(scratch), model_dir)
            backend = graphs[name] = loaded("onnx-int8", tag)[0]  # its pooling and streams, with the recipe's sessions
            if signed_int8_is_exact() or name.startswith(KERNELS_CHOSEN_INSIDE):
                sessions = [
                    ort.InferenceSession(str(graph), session_options(count), providers=["CPUExecutionProvider"]) for count in counts
                ]
            else:
                sessions = unsigned_int8_sessions(graph, counts)
            backend.streams = Streams(*sessions)
        for name in [name for name in chosen if name in OPENVINO]:
            from serving.compat import openvino_telemetry

            openvino_telemetry.apply()  # before OpenVINO's import, as the server does
            from models.backends.openvino_backend import OpenVinoBackend

            build, hints = OPENVINO[name]
            graph = build(onnx_dir(model_dir) / FP32, Path(scratch), model_dir) if build else onnx_dir(model_dir) / FP32
            backend = graphs[name] = OpenVinoBackend(model_dir, spec, threads)
            backend.compile(graph, threads, **hints)
        precision = graphs["served"].precision
        rows = {name: {"fidelity_to_fp32": fidelity(backend, spec, ids[:256], reference)} for name, backend in graphs.items()}
        if args.fidelity_only:
            print(rows)
            write_result("int8-recipes-fidelity.json", {"int8_kernels": precision, "recipes": rows})
            return
        rates: dict[str, dict[str, list[float]]] = {name: {"alone": [], "sorted-32": []} for name in graphs}
        for turn in range(args.rounds):  # interleaved, the order reversed every other round: a slow minute falls on every graph
            for name, backend in list(graphs.items())[:: 1 if turn % 2 == 0 else -1]:
                for mode in rates[name]:
                    rates[name][mode].append(best_rate(backend, spec, ids, mode, 1))
    for name, row in rows.items():
        row["alone_pass_ms"] = round(1000 / max(rates[name]["alone"]), 2)
        row["sorted_32_texts_per_s"] = round(max(rates[name]["sorted-32"]), 1)
    served = rows["served"]
    for row in rows.values():
        row["sorted_32_over_served"] = round(row["sorted_32_texts_per_s"] / served["sorted_32_texts_per_s"], 3)
        row["alone_pass_over_served"] = round(row["alone_pass_ms"] / served["alone_pass_ms"], 3)
    print(rows)
    target = args.output or ("int8-recipes-subset.json" if args.recipes else "int8-recipes.json")  # the full run's file stays whole
    write_result(target, {"threads": threads, "rounds": args.rounds, "int8_kernels": precision, "recipes": rows})


if __name__ == "__main__":
    main()
