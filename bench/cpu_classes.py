"""The int8 recipes on every CPU class reachable here, and what the start-up self-check costs.

    python -m bench.cpu_classes       # make cpu-classes → bench/results/cpu-classes.json (~15 min)

Recipes: fp32 ONNX; the per-token int8 graph on ONNX Runtime's u8×s8 kernels; the same with uint8 weights
(u8×u8, what ``models.cpu`` picks without VNNI). Here: accuracy on the gate texts of ``tests/test_onnx.py``
against torch fp32, speed alone and in sorted batches of 32, one process per recipe, best of 3 turns, and
``auto``'s start-up cost. Under qemu-user's Haswell (AVX2, no VNNI; when ``qemu-x86_64`` is installed, and
ONNX Runtime reads the emulated CPU's flags with ``cpuid``): each int8 graph's accuracy on the 60 hardest
gate texts and what ``auto`` serves; speed under emulation means nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bentoml
import numpy as np

from bench.ceiling import STREAM, bench_tag, fidelity, rate
from harness.results import write_result
from harness.texts import short_texts
from models import cpu
from models.backends import load_backend
from models.backends.onnx_backend import OnnxBackend
from models.spec import ModelSpec
from models.tokenization import TextTokenizer
from serving.settings import settings

# name → (CPU graph, uint8 weights)
RECIPES = {"fp32": ("fp32", None), "int8 u8×s8 (stored graph)": ("int8", False), "int8 u8×u8 (uint8 weights)": ("int8", True)}
EMULATED_TEXTS = 60  # the last 60 gate texts: the 27 hard ones and 33 varied
QEMU = ["qemu-x86_64", "-cpu", "Haswell"]


def load(graph: str, unsigned: bool | None):
    """The recipe's backend on the CPU, its int8 kernels chosen (``unsigned``) rather than read off the CPU's flags."""
    stored = bentoml.models.get(bench_tag())
    spec = ModelSpec.of(stored)
    return OnnxBackend(stored.path, spec, settings.runner_threads, cpu_graph=graph, cuda=False, unsigned=unsigned), stored, spec


def child(task: str, recipe: str, reference: str) -> dict:
    """One measurement in a process of its own (sessions in one process skew each other)."""
    from tests.test_onnx import TEXTS

    if task == "startup":
        stored = bentoml.models.get(bench_tag())
        started = time.perf_counter()
        backend = load_backend(recipe, stored.path, ModelSpec.of(stored), settings.runner_threads)
        return {
            "seconds": time.perf_counter() - started,
            "backend": backend.name,
            "precision": backend.precision,
            "fidelity": backend.fidelity.as_dict() if backend.fidelity else None,
        }
    backend, stored, spec = load(*RECIPES[recipe])
    tokenizer = TextTokenizer(stored.path, spec.max_length)
    if task == "speed":
        ids = [e.ids for e in tokenizer.encode(short_texts(STREAM))]
        return {mode: max(rate(backend, spec, ids, mode) for _ in range(2)) for mode in ("alone", "sorted-32")}
    texts = TEXTS if task == "accuracy" else TEXTS[-EMULATED_TEXTS:]
    rows = np.load(reference)[-len(texts) :]
    return {**fidelity(backend, spec, [e.ids for e in tokenizer.encode(texts)], rows), "texts": len(texts), "precision": backend.precision}


def measure(task: str, recipe: str, reference: Path, emulated: bool = False) -> dict:
    command = [sys.executable, "-m", "bench.cpu_classes", "--child", task, recipe, str(reference)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run((QEMU if emulated else []) + command, check=True, capture_output=True, text=True, env=env)
    return json.loads(done.stdout.splitlines()[-1])


def main(rounds: int = 3) -> None:
    from models.store import default_model_dir
    from tests.reference import sentence_embeddings
    from tests.test_onnx import TEXTS

    stored = bentoml.models.get(bench_tag())
    scratch = Path(tempfile.mkdtemp(prefix="cpu-classes-"))
    reference = scratch / "torch-fp32.npy"
    np.save(reference, sentence_embeddings(default_model_dir(), TEXTS, max_length=ModelSpec.of(stored).max_length))
    here = {recipe: measure("accuracy", recipe, reference) for recipe in RECIPES}
    for _ in range(rounds):  # in turns: a slow spell of the machine hits every recipe alike
        for recipe in RECIPES:
            for mode, value in measure("speed", recipe, reference).items():
                here[recipe][mode] = round(max(here[recipe].get(mode, 0.0), value), 1)
    startup = {name: [measure("startup", name, reference) for _ in range(rounds)] for name in ("onnx-int8", "auto")}
    report = {
        "model": str(stored.tag),
        "here": {"class": cpu.describe(), "recipes": here},
        "self_check": {
            "load_onnx_int8_s": round(min(run["seconds"] for run in startup["onnx-int8"]), 3),
            "load_auto_s": round(min(run["seconds"] for run in startup["auto"]), 3),
            "auto": {key: startup["auto"][0][key] for key in ("backend", "precision", "fidelity")},
        },
        "accuracy": f"cosine to torch fp32, each text alone: {len(TEXTS)} gate texts here, the last {EMULATED_TEXTS} emulated",
        "speed": f"sentences/s, {STREAM} short texts pre-tokenized, {settings.runner_threads} threads, "
        f"one process per recipe, best of {rounds} turns",
    }
    if shutil.which(QEMU[0]):
        int8 = [recipe for recipe in RECIPES if recipe != "fp32"]
        report["avx2_emulated"] = {
            "qemu": " ".join(QEMU),
            "recipes": {recipe: measure("emulated", recipe, reference, emulated=True) for recipe in int8},
            "auto": measure("startup", "auto", reference, emulated=True),
        }
    shutil.rmtree(scratch)
    print(json.dumps(report, indent=1))
    write_result("cpu-classes.json", report)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(*sys.argv[2:5])))
    else:
        main()
