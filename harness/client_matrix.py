"""LangChain's and LlamaIndex's integrations, unchanged, as their users set them up against a server.

They cannot share the project's site-packages (langchain-openai needs openai 3, langchain-cohere cohere 5,
both stacks huggingface_hub 1.x), so they live in a venv of their own, ``<venv>/clients``
(``requirements-clients.txt``, installed by ``make venv``), and ``run`` starts this file there as a
subprocess: it imports nothing of the project and prints, as JSON, what each client gave.

LangChain's ``OpenAIEmbeddings`` at its defaults tokenizes with tiktoken's ``cl100k_base``, whose file
tiktoken downloads from a blob store; ``python harness/client_matrix.py tiktoken DIR`` puts it in ``DIR``
(its cache, ``TIKTOKEN_CACHE_DIR``) from the copy litellm's wheel ships, which tiktoken checks against
the SHA-256 it expects.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CLIENTS = Path(sys.prefix) / "clients"
TIKTOKEN_WHEEL = "litellm==1.110.2"
# tiktoken's cache name for cl100k_base: the SHA-1 of its URL (tiktoken.load.read_file_cached).
CL100K_BASE = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"


def run(url: str, embedder: str, reranker: str, texts: list[str], query: str, documents: list[str]) -> dict:
    """What each integration gives for ``texts`` and ``query`` (embedders) and ``query`` over ``documents``
    (rerankers) from the server at ``url``; a client's refusal as ``{status, message}``."""
    python = CLIENTS / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"the client matrix is not installed in {CLIENTS}: make venv (requirements-clients.txt)")
    # The tests' offline switch would keep huggingface_hub from calling even a local URL.
    env = {name: value for name, value in os.environ.items() if name != "HF_HUB_OFFLINE"}
    env["TIKTOKEN_CACHE_DIR"] = str(CLIENTS / "tiktoken")
    job = {"url": url, "embedder": embedder, "reranker": reranker, "texts": texts, "query": query, "documents": documents}
    result = subprocess.run([str(python), __file__], input=json.dumps(job), capture_output=True, text=True, env=env, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"the client matrix failed: {result.stderr[-3000:]}")
    return json.loads(result.stdout)


def answers(job: dict) -> dict:
    import asyncio

    import openai
    from langchain_cohere import CohereEmbeddings, CohereRerank
    from langchain_huggingface import HuggingFaceEndpointEmbeddings
    from langchain_openai import OpenAIEmbeddings
    from llama_index.embeddings.text_embeddings_inference import TextEmbeddingsInference

    url, texts, query = job["url"], job["texts"], job["query"]
    openai_style = {"model": job["embedder"], "base_url": f"{url}/v1", "api_key": "unused"}
    embedders = {
        "langchain-openai": OpenAIEmbeddings(**openai_style, check_embedding_ctx_length=False),
        "langchain-huggingface": HuggingFaceEndpointEmbeddings(model=url),
        "langchain-cohere": CohereEmbeddings(model=job["embedder"], base_url=url, cohere_api_key="unused"),
    }
    found = {name: {"documents": client.embed_documents(texts), "query": client.embed_query(query)} for name, client in embedders.items()}
    llama = TextEmbeddingsInference(model_name=job["embedder"], base_url=url, timeout=60)
    found["llama-index-tei"] = {
        "documents": llama.get_text_embedding_batch(texts),
        "query": asyncio.run(llama.aget_query_embedding(query)),  # its async path too
    }
    try:  # at its defaults: tiktoken's ids for the texts
        OpenAIEmbeddings(**openai_style).embed_documents(texts)
        found["langchain-openai at its defaults"] = {"status": 200}
    except openai.APIStatusError as refused:
        found["langchain-openai at its defaults"] = {"status": refused.status_code, "message": str(refused.body)}
    reranker = CohereRerank(model=job["reranker"], base_url=url, cohere_api_key="unused")
    ranked = reranker.rerank(job["documents"], query, top_n=3)
    found["langchain-cohere rerank"] = [[result["index"], result["relevance_score"]] for result in ranked]
    return found


def put_tiktoken(directory: Path) -> None:
    """cl100k_base's file into tiktoken's cache at ``directory``, from litellm's wheel (not installed)."""
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as download:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", download, TIKTOKEN_WHEEL], check=True)
        (wheel,) = Path(download).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            (directory / CL100K_BASE).write_bytes(archive.read(f"litellm/litellm_core_utils/tokenizers/{CL100K_BASE}"))
    os.environ["TIKTOKEN_CACHE_DIR"] = str(directory)
    import tiktoken

    tiktoken.get_encoding("cl100k_base")  # checks the file's SHA-256


if __name__ == "__main__":
    if sys.argv[1:2] == ["tiktoken"]:
        put_tiktoken(Path(sys.argv[2]))
    else:
        print(json.dumps(answers(json.load(sys.stdin))))
