"""ONNX Runtime's transformer fusions under the per-token int8 graph, in process: faster, and as faithful?

    python -m bench.fusions     # → bench/results/fusions.json

The served int8 graph quantizes the weight MatMuls of the exported fp32 graph (``models.quantize``) and
leaves the rest to ONNX Runtime's session optimizations (``ORT_ENABLE_ALL``). Its offline optimizer
(``onnxruntime.transformers.optimizer``) fuses more: attention's core (scores, mask, softmax, context) into
one ``MultiHeadAttention`` op that keeps the Q, K and V projections as MatMuls, so that they can still be
quantized per token. This measures, on the embedded all-MiniLM-L6-v2 and this machine's int8 kernels:

- ``served``: the stored int8 graph, as ``auto`` serves it here;
- ``fused``: the fp32 graph fused offline (MultiHeadAttention, SkipLayerNorm, BiasGelu), then quantized per token;

each a lone text's pass and length-sorted batches of 32 short texts (``bench.ceiling``), interleaved over
rounds (best of each), and its fidelity to the fp32 graph with the gates' own measures (alone vs in
sorted batches too: a fused kernel must not make a text depend on its batch mates).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import bentoml
import numpy as np
import onnxruntime as ort
from onnxruntime.transformers.fusion_options import FusionOptions
from onnxruntime.transformers.optimizer import optimize_model
from transformers import AutoConfig

from bench.ceiling import bench_tag, best_rate, fidelity, loaded
from harness.results import write_result
from models.backends.onnx_backend import Streams, session_options, unsigned_int8_sessions
from models.cpu import signed_int8_is_exact
from models.inference import run_batch
from models.onnx_layout import FP32, onnx_dir
from models.quantize import PerTokenInt8, save_graph
from serving.settings import settings


def fused_int8(fp32: Path, directory: Path, heads: int, hidden: int) -> Path:
    """The fp32 graph fused offline (attention's core as MultiHeadAttention), then quantized per token."""
    options = FusionOptions("bert")
    options.use_multi_head_attention = True
    fused = optimize_model(
        str(fp32), model_type="bert", num_heads=heads, hidden_size=hidden, optimization_options=options, opt_level=1, use_gpu=False
    )
    print("fused:", {op: count for op, count in fused.get_fused_operator_statistics().items() if count})
    return save_graph(PerTokenInt8(fused.model).rewrite(), directory / "fused-int8.onnx")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tag = bench_tag()
    reference_backend, spec, ids = loaded("onnx", tag)
    reference = [run_batch(reference_backend, [one], spec.pad_id, settings.token_budget)[0] for one in ids[:256]]
    served, _, _ = loaded("onnx-int8", tag)
    fused, _, _ = loaded("onnx-int8", tag)
    threads = settings.runner_threads
    counts = [1, threads] if threads > 1 else [1]
    with tempfile.TemporaryDirectory() as scratch:
        config = AutoConfig.from_pretrained(bentoml.models.get(tag).path)
        graph = fused_int8(onnx_dir(bentoml.models.get(tag).path) / FP32, Path(scratch), config.num_attention_heads, config.hidden_size)
        if signed_int8_is_exact():
            sessions = [ort.InferenceSession(str(graph), session_options(count), providers=["CPUExecutionProvider"]) for count in counts]
        else:
            sessions = unsigned_int8_sessions(graph, counts)
        fused.streams = Streams(*sessions)
        graphs = {"served": served, "fused": fused}
        rates: dict[str, dict[str, list[float]]] = {name: {"alone": [], "sorted-32": []} for name in graphs}
        for _ in range(args.rounds):  # interleaved: a slow minute of the machine falls on both
            for name, backend in graphs.items():
                for mode in rates[name]:
                    rates[name][mode].append(best_rate(backend, spec, ids, mode, 1))
        rows = {
            name: {
                "precision": backend.precision,
                "alone_pass_ms": round(1000 / max(rates[name]["alone"]), 2),
                "sorted_32_texts_per_s": round(max(rates[name]["sorted-32"]), 1),
                "fidelity_to_fp32": fidelity(backend, spec, ids[:256], np.stack(reference)),
            }
            for name, backend in graphs.items()
        }
    ratios = {
        "fused_over_served_sorted_32": round(rows["fused"]["sorted_32_texts_per_s"] / rows["served"]["sorted_32_texts_per_s"], 3),
        "fused_over_served_alone_pass": round(rows["served"]["alone_pass_ms"] / rows["fused"]["alone_pass_ms"], 3),
    }
    print(rows, ratios)
    write_result("fusions.json", {"threads": threads, "rounds": args.rounds, "graphs": rows, "ratios": ratios})


if __name__ == "__main__":
    main()
