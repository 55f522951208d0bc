"""The routes, one module per API whose shapes they answer: ``openai`` (embeddings, the model list),
``cohere`` (v2 embed, and the rerank shape Cohere and Jina share), ``tei`` (text-embeddings-inference's
routes), ``vllm`` (its score API) and ``textbento`` (classify, sentiment, multi-vector). Each route is a plain FastAPI route over
the API worker's pipeline, which it gets as a dependency (``api.pipeline.ThePipeline``).
"""

from __future__ import annotations

from . import cohere, openai, tei, textbento, vllm

ROUTERS = (openai.router, cohere.router, vllm.router, textbento.router, tei.router)
