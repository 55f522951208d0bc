"""Inference backends: padded token ids in, logits (classifiers) or sentence embeddings (embedders) out.

``torch`` runs the transformers model; ``onnx`` and ``onnx-int8`` run the graphs that
``models.export`` wrote into the stored model (fp32, or fp16 on CUDA, and per-token dynamic
int8 on CPU) in ONNX Runtime, ``openvino`` the fp32 graph in OpenVINO (bf16 where the CPU has
bf16 units; a candidate of ``auto`` where it has AMX and the int8 graph misses). Every backend runs a padded batch as one forward pass.
``auto`` serves the fastest of them that passes the accuracy gates of ``tests/test_onnx.py`` on
the device at hand: both measured there, at start-up (``models.selfcheck``).
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from ..cpu import describe, has_amx_bf16
from ..fidelity import Trial
from ..inference import Backend
from ..memory import release_freed_memory
from ..onnx_layout import has_onnx
from ..selfcheck import probe_ids, self_check
from ..selfcheck import speeds as texts_per_s
from ..spec import ModelSpec

logger = logging.getLogger("textbento")


BACKENDS = ("auto", "torch", "onnx", "onnx-int8", "openvino")
MARGIN = 1.3  # how much faster than the default another compute must run here to be served (``chosen``)
# How much faster than fp32 here a compute that is not exact must run to be served at all (``chosen``): on a
# CPU whose int8 kernels are no faster than its fp32 ones (AVX2 on 128-bit units, Zen 1) fp32 is as fast and exact.
INEXACT_GAIN = 1.1


def load_backend(name: str, model_dir: str | Path, spec: ModelSpec, threads: int, trust_remote_code: bool = False) -> Backend:
    """The backend called ``name`` with the model in ``model_dir`` loaded and ready.

    ``auto``: the fastest compute of the device that passes the self-check against the fp32 graph
    here (``checked``), fp32 with one warning where none does. A model stored without ONNX graphs
    gets torch (fp16 on CUDA) rather than a failure; torch runs a custom-code model's code only with
    ``trust_remote_code`` (``TEXTBENTO_TRUST_REMOTE_CODE``).
    """
    if name == "auto":
        if not has_onnx(model_dir):
            if importlib.util.find_spec("torch") is None:  # the CPU image: ONNX Runtime only
                raise FileNotFoundError(
                    f"{model_dir} has no ONNX graphs and PyTorch is not installed; add them with: python -m train_import.export_onnx <tag>"
                )
            return load_backend("torch", model_dir, spec, threads, trust_remote_code)
        served = checked(model_dir, spec, threads)
        release_freed_memory()
        return served
    if name == "torch":
        from .torch_backend import TorchBackend

        return TorchBackend(model_dir, spec, threads, trust_remote_code)
    if name in ("onnx", "onnx-int8"):
        from .onnx_backend import OnnxBackend

        # The int8 graph has CPU kernels only: asking for it means the CPU even where a GPU is.
        return OnnxBackend(model_dir, spec, threads, cpu_graph="int8" if name == "onnx-int8" else "fp32", cuda=name == "onnx")
    if name == "openvino":
        from .openvino_backend import OpenVinoBackend

        return OpenVinoBackend(model_dir, spec, threads)
    raise ValueError(f"unknown backend {name!r}; expected one of {BACKENDS}")


def checked(model_dir: str | Path, spec: ModelSpec, threads: int) -> Backend:
    """The device's fastest compute that passes the self-check against the fp32 graph here: on CUDA
    the fp16 graph if it passes, else fp32; on a CPU ``chosen`` of ``self_checked``'s candidates."""
    reference, candidates, probe = self_checked(model_dir, spec, threads)
    fast = candidates[0]
    if fast.device != "cuda":
        return chosen(reference, candidates, spec, probe)
    if fast.fidelity.passed:
        return fast
    from .onnx_backend import OnnxBackend

    reference = OnnxBackend(model_dir, spec, threads, cpu_graph="fp32", cuda_graph="fp32")  # not run on a GPU yet
    reference.fidelity = fast.fidelity
    return reference


def self_checked(model_dir: str | Path, spec: ModelSpec, threads: int) -> tuple[Backend, list[Backend], list]:
    """The fp32 CPU graph, the fast candidates each with its ``fidelity`` to it here, and the probe's ids.

    The candidates: the fp16 graph where CUDA is usable (then alone); on a CPU the per-token int8
    graph, its kernels picked from the CPU's flags (``models.cpu``; where they say u8×s8 is exact but
    the check disagrees, as flags and ``cpuid`` can under qemu or some hypervisors, the u8×u8
    kernels, exact on every x86 class, are checked next; where it still misses, the same with the Q/K/V
    projections left in fp32, built from the fp32 graph, and OpenVINO's bf16 where it is installed and
    the CPU has AMX). OpenVINO is weighed only there: beside an int8 graph that passes, bf16 held no
    lead of the margin on any CPU measured, AMX included (docs/design.md 5c), and loading it costs
    start-up and memory the process keeps. Each that misses the gates is named in one warning.
    """
    from .onnx_backend import SIGNED, OnnxBackend  # here: onnxruntime is loaded only where a graph is served

    reference = OnnxBackend(model_dir, spec, threads, cpu_graph="fp32", cuda=False)
    probe = probe_ids(model_dir, spec)
    fast = OnnxBackend(model_dir, spec, threads, cpu_graph="int8")
    fast.fidelity = self_check(fast, reference, spec, probe)
    candidates = [fast]
    if fast.device == "cpu":
        if not fast.fidelity.passed and fast.precision == SIGNED:
            missed(fast, "trying uint8 weights (u8×u8 kernels)")
            fast = candidates[0] = OnnxBackend(model_dir, spec, threads, cpu_graph="int8", unsigned=True)
            fast.fidelity = self_check(fast, reference, spec, probe)
        if not fast.fidelity.passed:  # more faithful, still faster than fp32 (docs/design.md 5b)
            partly = OnnxBackend(model_dir, spec, threads, cpu_graph="int8", fp32_roles=("qkv",))  # the flags' kernels
            partly.fidelity = self_check(partly, reference, spec, probe)
            candidates.append(partly)
            if has_amx_bf16() and importlib.util.find_spec("openvino") is not None:
                from .openvino_backend import OpenVinoBackend

                candidates.append(OpenVinoBackend(model_dir, spec, threads))
                candidates[-1].fidelity = self_check(candidates[-1], reference, spec, probe)
    fallback = "not a candidate" if any(candidate.fidelity.passed for candidate in candidates) else "serving fp32 ONNX instead"
    for candidate in candidates:
        if not candidate.fidelity.passed:
            missed(candidate, fallback)
    return reference, candidates, probe


def chosen(reference: Backend, candidates: list[Backend], spec: ModelSpec, probe: list) -> Backend:
    """Of fp32 and the candidates that passed their self-check, the one served, with every trial.

    The default is the first candidate that passed (per-token int8: the fastest on most CPU classes
    measured, docs/design.md 5b) where it runs ``INEXACT_GAIN`` times fp32's texts/s here, else fp32,
    which is exact. Another replaces the default only when it runs ``MARGIN`` times its texts/s here:
    timings on a busy machine move by tens of percent, and a server should not change what it computes
    from one start to the next for less.
    """
    passed = [candidate for candidate in candidates if candidate.fidelity.passed]
    weighed = [reference, *passed]
    speeds = dict(zip(weighed, texts_per_s(weighed, spec, probe)))
    served = passed[0] if passed and speeds[passed[0]] >= INEXACT_GAIN * speeds[reference] else reference
    fastest = max(speeds, key=speeds.get)
    if speeds[fastest] >= MARGIN * speeds[served]:
        served = fastest
    if not passed:  # /v1/models shows why fp32 is served: the check that missed
        reference.fidelity = candidates[-1].fidelity
    served.trials = tuple(
        Trial(backend.name, backend.precision, None if backend is reference else backend.fidelity, speeds.get(backend), backend is served)
        for backend in [reference, *candidates]
    )
    if served is reference and passed:
        gain = speeds[passed[0]] / speeds[reference]
        logger.info("%s runs %.2fx fp32's texts/s here (under %.1fx): serving fp32, exact", passed[0].precision, gain, INEXACT_GAIN)
    return served


def missed(backend: Backend, then: str) -> None:
    """One warning line: what missed the gates here, by how much, on which CPU, and what is next."""
    f = backend.fidelity
    flips = "" if f.max_flipped_mass is None else f", weights zero on one graph only up to {f.max_flipped_mass:.2%} of a text's L1 mass"
    logger.warning(
        "%s %s misses the accuracy gates on this machine (min cosine %.4f, mean %.5f to fp32 over %d probe texts%s; CPU: %s): %s",
        backend.name,
        backend.precision,
        f.min_cosine,
        f.mean_cosine,
        f.probe_texts,
        flips,
        describe(),
        then,
    )
