"""Which GPU each model's Encoder gets. BentoML's allocator places every service by its
``resources={"gpu": n}``: whole GPUs in turn, and equal fractions together on the first GPU
(``_bentoml_impl/server/allocator.py``). So each model asks for a whole GPU when the machine has
one for each, and for ``1/models`` of one otherwise: then all share the first GPU, each with its own
CUDA context and memory arena (docs/design.md, several models). ``CUDA_VISIBLE_DEVICES`` still limits what is seen.
"""

from __future__ import annotations

from .compat.bentoml_internals import system_resources


def gpu_share(models: int) -> float:
    """Of a GPU, what each of ``models`` Encoders asks for."""
    gpus = len(system_resources()["nvidia.com/gpu"])
    return 1.0 if gpus >= models else 1 / models
