"""Inference backends: padded token ids in, logits (classifiers) or sentence embeddings (embedders) out.

``torch`` runs the transformers model; ``onnx`` and ``onnx-int8`` run the graphs that
``models.export`` wrote into the stored model (fp32, or fp16 on CUDA, and per-token dynamic
int8 on CPU). Every backend runs a padded batch as one forward pass.
``auto`` picks the fastest of them that passes the accuracy gates of ``tests/test_onnx.py`` on
the device at hand: measured there, at start-up (``models.selfcheck``).
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from ..cpu import describe
from ..inference import Backend
from ..onnx_layout import has_onnx
from ..selfcheck import PROBE_TEXTS, self_check
from ..spec import ModelSpec
from ..tokenization import TextTokenizer

logger = logging.getLogger("textbento")


BACKENDS = ("auto", "torch", "onnx", "onnx-int8")


def load_backend(name: str, model_dir: str | Path, spec: ModelSpec, threads: int) -> Backend:
    """The backend called ``name`` with the model in ``model_dir`` loaded and ready.

    ``auto``: the fast graph of the device (fp16 on CUDA; per-token int8 on CPU, which runs the
    most sentences/s on every CPU class measured, docs/design.md 5b), served only if it passes the
    self-check against the fp32 graph here; otherwise fp32, with one warning. A model stored
    without ONNX graphs gets torch (fp16 on CUDA) rather than a failure.
    """
    if name == "auto":
        if not has_onnx(model_dir):
            if importlib.util.find_spec("torch") is None:  # the CPU image: ONNX Runtime only
                raise FileNotFoundError(
                    f"{model_dir} has no ONNX graphs and PyTorch is not installed; add them with: python -m train_import.export_onnx <tag>"
                )
            return load_backend("torch", model_dir, spec, threads)
        return checked(model_dir, spec, threads)
    if name == "torch":
        from .torch_backend import TorchBackend

        return TorchBackend(model_dir, spec, threads)
    if name in ("onnx", "onnx-int8"):
        from .onnx_backend import OnnxBackend

        # The int8 graph has CPU kernels only: asking for it means the CPU even where a GPU is.
        return OnnxBackend(model_dir, spec, threads, cpu_graph="int8" if name == "onnx-int8" else "fp32", cuda=name == "onnx")
    raise ValueError(f"unknown backend {name!r}; expected one of {BACKENDS}")


def checked(model_dir: str | Path, spec: ModelSpec, threads: int) -> Backend:
    """The device's fast ONNX graph if it passes the self-check against fp32 here, else fp32.

    On a CPU the int8 graph's kernels are picked from the CPU's flags (``models.cpu``); where they
    say u8×s8 is exact but the check disagrees (flags and ``cpuid`` can differ: qemu, some
    hypervisors), the u8×u8 kernels, exact on every x86 class, are checked next.
    """
    from .onnx_backend import SIGNED, OnnxBackend  # here: onnxruntime is loaded only where a graph is served

    reference = OnnxBackend(model_dir, spec, threads, cpu_graph="fp32", cuda=False)
    probe = [encoded.ids for encoded in TextTokenizer(model_dir, spec.max_length).encode(PROBE_TEXTS)]
    fast = OnnxBackend(model_dir, spec, threads, cpu_graph="int8")
    fast.fidelity = self_check(fast, reference, spec, probe)
    if not fast.fidelity.passed and fast.precision == SIGNED:
        missed(fast, "trying uint8 weights (u8×u8 kernels)")
        fast = OnnxBackend(model_dir, spec, threads, cpu_graph="int8", unsigned=True)
        fast.fidelity = self_check(fast, reference, spec, probe)
    if fast.fidelity.passed:
        return fast
    missed(fast, "serving fp32 ONNX instead")
    if fast.device == "cuda":  # fp32 on the GPU rather than the CPU reference (not run on a GPU yet)
        reference = OnnxBackend(model_dir, spec, threads, cpu_graph="fp32", cuda_graph="fp32")
    reference.fidelity = fast.fidelity
    return reference


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
