"""Model-side code of textbento: everything between text and numbers.

The rule: nothing here speaks HTTP or knows BentoML's serving internals (no ``bentoml._internal``,
FastAPI, Starlette, aiohttp, ``api`` or ``serving``); the services in ``service.py`` and the
plumbing in ``serving/`` call into it.

One module, one job:

- ``cpu``          the CPU class: which int8 kernels ONNX Runtime runs here, recorded with every figure
- ``spec``         what the served model is (task, labels, pooling, limits), as stored in the model store
- ``tasks``        one module per task (embed, sparse, classify, multivector): how an import recognises it, what its
                   graph answers, how the self-check compares it, which routes it serves; ``TASKS``, the one table
- ``detection``    reads what a ``save_pretrained`` directory says about its model (import time only)
- ``tokenization`` text → token ids, truncated to the model's limit, reporting what was cut
- ``batching``     token ids → length-sorted, token-budgeted, padded sub-batches
- ``heads``        the torch modules a task's graph computes: one output, SPLADE's pooling, ColBERT's token vectors
- ``backends``     padded ids → logits or pooled embeddings (PyTorch, ONNX Runtime)
- ``fidelity``     how close a fast graph came to fp32, and the gates it must pass
- ``selfcheck``    the start-up check that holds ``auto``'s fast graph to fp32 on this machine
- ``postprocess``  softmax and labels; pooling and normalisation
- ``inference``    one collected batch through batching, a backend and back into request order
- ``store``        Hugging Face directory or Hub id → BentoML model store, with its spec as metadata
- ``export``       stored model → ONNX graphs in its own directory (import time only)
- ``quantize``     fp32 ONNX graph → per-token int8 (CPU) and fp16 (CUDA) graphs (import time only)
- ``onnx_layout``  where those graphs live, for the exporter and the ONNX backend
"""

import os

# ONNX Runtime (1.31 on Linux) writes a device id under $HOME and sends usage events to Microsoft's
# collector from every process that imports it, unless told not to: a server owes nobody that, and a
# pod on a read-only root with no egress (deploy/kubernetes) cannot. Set before anything imports it.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
