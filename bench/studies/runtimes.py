"""CPU runtimes for a stored embedder on this machine: fidelity to fp32, batch invariance and speed.

    python -m bench.studies.runtimes [TAG]   # → bench/results/runtimes.json

Candidates: ONNX Runtime fp32 and the served per-token int8 graph; OpenVINO compiling the stored
fp32 ONNX graph as it is, in f32 and in bf16 (``INFERENCE_PRECISION_HINT``: AMX or AVX-512 BF16
units where the CPU has them, emulated otherwise). Each is held to ONNX Runtime fp32 on the same
texts, each text alone (min and mean cosine); invariance is a text alone against the same text in
a batch of 31 random mates on the same runtime (min cosine); speed is texts/s in process with
2 threads, each text alone and in length-sorted batches of 32, median of 3 interleaved rounds.
Then what ``auto`` chose among them here (``models.backends.chosen``) and what the choice cost.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from bench import write_result
from harness.texts import short_texts
from models.backends import load_backend
from models.backends.onnx_backend import OnnxBackend
from models.batching import split_segments
from models.inference import pad
from models.postprocess import sentence_embeddings
from models.selfcheck import PROBE_TEXTS
from models.spec import ModelSpec
from models.tokenization import TextTokenizer

THREADS = 2


class OpenVino:
    """The stored fp32 ONNX graph compiled by OpenVINO for the CPU in ``precision`` (``f32`` or ``bf16``)."""

    def __init__(self, model_dir: str, spec: ModelSpec, precision: str) -> None:
        import openvino

        hints = {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": THREADS, "PERFORMANCE_HINT": "LATENCY"}
        self.compiled = openvino.Core().compile_model(f"{model_dir}/onnx/model.onnx", "CPU", hints)
        self.request, self.spec = self.compiled.create_infer_request(), spec
        self.inputs = {port.get_any_name() for port in self.compiled.inputs}

    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        input_ids, token_type_ids = split_segments(input_ids)
        feed = {"input_ids": input_ids.astype(np.int64), "attention_mask": attention_mask.astype(np.int64)}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = token_type_ids.astype(np.int64)
        tokens = self.request.infer(feed)[self.compiled.outputs[0]]
        return sentence_embeddings(tokens, attention_mask, self.spec.pooling, self.spec.normalize, ())


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def main(tag: str) -> None:
    import bentoml
    import openvino

    model = bentoml.models.get(tag)
    spec, directory = ModelSpec.of(model), model.path
    tokenizer = TextTokenizer(directory, spec.max_length)
    long_texts = [" ".join(short_texts(40)[i * 10 : (i + 1) * 10]) for i in range(4)]
    gate = [e.ids for e in tokenizer.encode([*PROBE_TEXTS, *short_texts(40), *long_texts])]
    timed = [e.ids for e in tokenizer.encode(short_texts(512))]
    by_length = sorted(timed, key=len)
    reference = OnnxBackend(directory, spec, THREADS, cpu_graph="fp32")
    candidates = {
        "onnxruntime fp32": reference,
        "onnxruntime per-token int8": OnnxBackend(directory, spec, THREADS, cpu_graph="int8"),
        "openvino f32": OpenVino(directory, spec, "f32"),
        "openvino bf16": OpenVino(directory, spec, "bf16"),
    }

    def alone(backend, ids) -> np.ndarray:
        return np.stack([backend.forward(*pad([one], spec.pad_id))[0] for one in ids])

    expected, rng, report = alone(reference, gate), np.random.default_rng(0), {}
    for name, backend in candidates.items():
        rows = alone(backend, gate)
        mates = [
            backend.forward(*pad([gate[i], *(gate[j] for j in rng.choice(len(gate), 31))], spec.pad_id))[0] for i in range(0, len(gate), 7)
        ]
        agreement = cosine(rows, expected)
        report[name] = {
            "min_cosine": round(float(agreement.min()), 5),
            "mean_cosine": round(float(agreement.mean()), 5),
            "invariance_min_cosine": round(float(cosine(np.stack(mates), rows[::7]).min()), 7),
        }
    speeds: dict[str, dict[str, list[float]]] = {name: {"alone": [], "sorted_32": []} for name in candidates}
    for _ in range(3):
        for name, backend in candidates.items():
            started = time.perf_counter()
            alone(backend, timed[:150])
            speeds[name]["alone"].append(150 / (time.perf_counter() - started))
            started = time.perf_counter()
            for first in range(0, len(by_length), 32):
                backend.forward(*pad(by_length[first : first + 32], spec.pad_id))
            speeds[name]["sorted_32"].append(len(timed) / (time.perf_counter() - started))
    for name, modes in speeds.items():
        report[name].update({f"{mode}_texts_per_s": round(statistics.median(values)) for mode, values in modes.items()})
    print("\n".join(f"{name}: {figures}" for name, figures in report.items()))
    write_result(
        "runtimes.json",
        {"model": tag, "threads": THREADS, "openvino": openvino.__version__, "candidates": report, "auto": auto_choice(directory, spec)},
    )


def auto_choice(directory: str, spec: ModelSpec) -> dict:
    """What ``auto`` serves here, every trial it weighed, and what the choice costs at start-up: its
    load against loading the int8 graph alone (median of 3 each, interleaved)."""
    timings: dict[str, list[float]] = {"auto": [], "onnx-int8": []}
    loaded = {}
    for _ in range(3):
        for name in timings:
            started = time.perf_counter()
            loaded[name] = load_backend(name, directory, spec, THREADS)
            timings[name].append(time.perf_counter() - started)
    served = loaded["auto"]
    seconds = {name: round(statistics.median(values), 2) for name, values in timings.items()}
    return {
        "served": f"{served.name} {served.precision}",
        "trials": [trial.as_dict() for trial in served.trials],
        "load_s": seconds,
        "choice_cost_s": round(seconds["auto"] - seconds["onnx-int8"], 2),
    }


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "text-model:latest")
