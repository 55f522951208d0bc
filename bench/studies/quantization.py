"""Every int8 recipe tried, on the same weights, texts and cores: accuracy, batch invariance, speed.

    python -m bench.studies.quantization    # all-MiniLM-L6-v2 → bench/results/quantization.json

Graphs: the TorchScript export that ``models.export`` stores as fp32 ("plain"), the same graph
with ONNX Runtime's transformer fusions (fused ``Attention``, "fused"), and the dynamo exporter's.
Recipes: per-token int8 (``models.quantize``) under
several policies (per role of the MatMul's input: the Q/K/V projections of unfused attention,
the FFN down-projection after GELU, every other), ONNX Runtime's stock per-tensor dynamic int8,
and its blockwise 8-bit ``MatMulNBits`` (int8 compute). Accuracy is on the gate texts of
``tests/test_onnx.py`` against torch fp32; speed is length-sorted batches of 32 and texts alone,
over 1,024 short texts, one process per recipe, best of three turns.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import bentoml
import numpy as np

from bench import RESULTS, write_result
from bench.ceiling import STREAM, bench_tag, fidelity, quantize_int8_per_tensor, rate
from harness.texts import short_texts
from models.backends import load_backend
from models.export import export_fp32
from models.inference import run_batch
from models.onnx_layout import FP32, INT8, onnx_dir
from models.quantize import SERVED_POLICY, quantize_int8
from models.spec import ModelSpec
from models.tokenization import TextTokenizer
from serving.settings import settings

SYMMETRIC = {"qkv": "symmetric", "after_gelu": "symmetric", "other": "symmetric"}
ASYMMETRIC = {"qkv": "asymmetric", "after_gelu": "asymmetric", "other": "asymmetric"}
QKV_FP32 = {**ASYMMETRIC, "qkv": "fp32"}
SYMMETRIC_BUT_AFTER_GELU = {**SYMMETRIC, "after_gelu": "asymmetric"}


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


def export_dynamo(model_dir: str, spec: ModelSpec, target: Path) -> Path:
    """The same model through torch's dynamo exporter (onnxscript), the maintained one."""
    import torch
    from transformers import AutoModel

    from models.export import SingleOutput

    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    input_ids = torch.arange(100, 116, dtype=torch.int64).reshape(2, 8)
    attention_mask = torch.ones(2, 8, dtype=torch.int64)
    attention_mask[1, 5:] = 0
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    with torch.no_grad():
        program = torch.onnx.export(
            SingleOutput(model, "last_hidden_state"),
            (input_ids, attention_mask),
            dynamo=True,
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_shapes=({0: batch, 1: sequence}, {0: batch, 1: sequence}),
            verbose=False,
        )
    program.save(str(target))
    return target


def matmul_nbits(source: Path, target: Path) -> Path:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), bits=8, block_size=32, is_symmetric=True, accuracy_level=4)
    quantizer.process()
    onnx.save(quantizer.model.model, str(target))
    return target


def policy(choice: dict[str, str]) -> Callable[[Path, Path], Path]:
    return lambda source, target: quantize_int8(source, target, choice)


# name → (graph, how its int8 graph is made from the fp32 one; None: the fp32 graph itself)
RECIPES: dict[str, tuple[str, Callable[[Path, Path], Path] | None]] = {
    "fp32 dynamo exporter": ("dynamo", None),
    "per-token, all asymmetric, dynamo exporter": ("dynamo", policy(SERVED_POLICY)),
    "fp32 plain": ("plain", None),
    "fp32 fused": ("fused", None),
    "per-tensor (ORT stock), plain": ("plain", quantize_int8_per_tensor),
    "per-tensor (ORT stock), fused": ("fused", quantize_int8_per_tensor),
    "MatMulNBits 8-bit block 32, fused": ("fused", matmul_nbits),
    "per-token, all symmetric, plain": ("plain", policy(SYMMETRIC)),
    "per-token, all asymmetric, plain (served)": ("plain", policy(SERVED_POLICY)),
    "per-token, Q/K/V fp32, plain": ("plain", policy(QKV_FP32)),
    "per-token, symmetric but after GELU, plain": ("plain", policy(SYMMETRIC_BUT_AFTER_GELU)),
    "per-token, all symmetric, fused": ("fused", policy(SYMMETRIC)),
    "per-token, all asymmetric, fused": ("fused", policy(ASYMMETRIC)),
    "per-token, symmetric but after GELU, fused": ("fused", policy(SYMMETRIC_BUT_AFTER_GELU)),
}


def speed(directory: Path, backend_name: str) -> dict[str, float]:
    """Sentences/s alone and in sorted batches of 32 of one recipe, in a process of its own.

    Several ONNX Runtime sessions in one process skew each other (their idle thread pools keep
    spinning): measured that way the recipes' order changed from run to run.
    """
    command = [sys.executable, "-m", "bench.studies.quantization", "--speed", str(directory), backend_name]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])


def measure_speed(directory: str, backend_name: str) -> None:
    stored = bentoml.models.get(bench_tag())
    spec = ModelSpec.of(stored)
    ids = [e.ids for e in TextTokenizer(stored.path, spec.max_length).encode(short_texts(STREAM))]
    backend = load_backend(backend_name, directory, spec, settings.runner_threads)
    print(json.dumps({mode: round(max(rate(backend, spec, ids, mode) for _ in range(2)), 1) for mode in ("alone", "sorted-32")}))


def main(rounds: int = 3) -> None:
    stored = bentoml.models.get(bench_tag())
    spec = ModelSpec.of(stored)
    from tests.test_onnx import TEXTS

    gate_ids = [e.ids for e in TextTokenizer(stored.path, spec.max_length).encode(TEXTS)]
    torch_backend = load_backend("torch", stored.path, spec, settings.runner_threads)
    reference = np.stack(run_batch(torch_backend, gate_ids, spec.pad_id, settings.token_budget))
    scratch = Path(tempfile.mkdtemp(prefix="quantization-"))
    graphs = {"plain": export_fp32(stored.path, spec, scratch / "plain.onnx")}
    graphs["fused"] = fuse(graphs["plain"], stored.path, scratch / "fused.onnx")
    graphs["dynamo"] = export_dynamo(stored.path, spec, scratch / "dynamo.onnx")
    results, directories = {}, {}
    for name, (graph, make) in RECIPES.items():
        directory = directories[name] = scratch / name.replace(" ", "_").replace("/", "_")
        shutil.copytree(stored.path, directory, ignore=shutil.ignore_patterns("onnx"))
        onnx_dir(directory).mkdir()
        shutil.copy(graphs[graph], onnx_dir(directory) / FP32)
        if make is not None:
            make(graphs[graph], onnx_dir(directory) / INT8)
        backend = load_backend("onnx" if make is None else "onnx-int8", directory, spec, settings.runner_threads)
        results[name] = fidelity(backend, spec, gate_ids, reference)
        del backend
    for _ in range(rounds):  # in turns, so that a slow spell of the machine hits every recipe alike
        for name, (_, make) in RECIPES.items():
            for mode, value in speed(directories[name], "onnx" if make is None else "onnx-int8").items():
                results[name][mode] = max(results[name].get(mode, 0.0), value)
    shutil.rmtree(scratch)
    for name, row in results.items():
        print(f"{name:48s} {json.dumps(row)}")
    report = {
        "model": str(stored.tag),
        "accuracy_texts": f"{len(TEXTS)} texts of tests/test_onnx.py, cosine to torch fp32",
        "speed": f"sentences/s, {STREAM} short texts pre-tokenized, {settings.runner_threads} threads, "
        f"one process per recipe, best of {rounds} turns",
        "results": results,
    }
    RESULTS.mkdir(exist_ok=True)
    write_result("quantization.json", report, indent=2)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--speed"]:
        measure_speed(*sys.argv[2:4])
    else:
        main()
