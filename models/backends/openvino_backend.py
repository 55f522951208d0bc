"""OpenVINO backend: the stored fp32 ONNX graph compiled for the CPU, computing in bf16 where the CPU
multiplies bf16 in hardware (AMX, AVX-512 BF16; ``models.cpu``), in fp32 elsewhere.

No new file in the store: OpenVINO reads the graph ``models.export`` wrote, as it is, so every model
stored with ONNX graphs can be served this way. ``auto`` weighs it against the ONNX Runtime graphs
on the machine at hand where the CPU has AMX and the per-token int8 graph misses the gates (docs/design.md,
5c). OpenVINO is not in the CPU image's requirements: only installed, ``pip install openvino``, does it
become a candidate. The server declines its usage telemetry before importing it (``serving/compat/openvino_telemetry.py``),
as do the tests and ``bench.int8_recipes``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino

from ..cpu import has_bf16_units
from ..onnx_layout import FP32, onnx_dir
from ..postprocess import load_dense
from ..spec import ModelSpec
from ..tasks import task_of
from .onnx_backend import graph_inputs


class OpenVinoBackend:
    """A stored model's fp32 ONNX graph compiled by OpenVINO's CPU plugin, loaded once per Encoder process."""

    name = "openvino"
    device = "cpu"
    trials = ()

    def __init__(self, model_dir: str | Path, spec: ModelSpec, threads: int) -> None:
        self.spec = spec
        self.task = task_of(spec)  # what the backend answers from the graph's output
        self.dense = load_dense(model_dir, spec.dense)
        self.precision = "bf16" if has_bf16_units() else "fp32"
        self.fidelity = None  # set by ``auto``'s self-check (models.selfcheck)
        self.compile(onnx_dir(model_dir) / FP32, threads, INFERENCE_PRECISION_HINT={"bf16": "bf16", "fp32": "f32"}[self.precision])

    def compile(self, graph: Path, threads: int, **hints: object) -> None:
        """Compile ``graph`` for the CPU with OpenVINO's ``hints`` (``bench.int8_recipes`` tries others)."""
        # One stream: one forward pass at a time, as the inference thread runs them.
        hints = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", **hints}
        compiled = openvino.Core().compile_model(str(graph), "CPU", hints)
        self.request = compiled.create_infer_request()
        self.output = compiled.outputs[0]

    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """Logits, pooled sentence embeddings, SPLADE weights or token vectors of one padded batch."""
        output = self.request.infer(graph_inputs(self.spec, input_ids, attention_mask))[self.output]
        return self.task.graph_answer(self.spec, output, attention_mask, self.dense, input_ids.shape[1])
