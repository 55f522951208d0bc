"""Model-side code of textbento: everything between text and numbers, no HTTP.

One module, one job:

- ``spec``         what the served model is (task, labels, pooling, limits), as stored in the model store
- ``detection``    reads a ``save_pretrained`` directory and works out its spec (import time only)
- ``tokenization`` text → token ids, truncated to the model's limit, reporting what was cut
- ``batching``     token ids → length-sorted, token-budgeted, padded sub-batches
- ``backends``     padded ids → logits or pooled embeddings (PyTorch, ONNX Runtime)
- ``postprocess``  softmax and labels; pooling and normalisation
- ``inference``    one collected batch through batching, a backend and back into request order
- ``coalesce``     concurrent requests' texts → fewer, larger calls to the Encoder (API workers)
- ``dispatch``     BentoML's adaptive batcher without its learned idle wait
- ``drain``        on SIGTERM, the Encoder answers its callers' last calls before it stops
- ``store``        Hugging Face directory or Hub id → BentoML model store, with its spec as metadata
- ``export``       stored model → ONNX graphs in its own directory (import time only)
- ``quantize``     fp32 ONNX graph → per-token int8 (CPU) and fp16 (CUDA) graphs (import time only)
- ``onnx_layout``  where those graphs live, for the exporter and the ONNX backend
- ``settings``     serving configuration from ``TEXTBENTO_*`` environment variables
"""
