"""The official openai client, unchanged, against /v1/embeddings (it asks for base64 by default)."""

import bentoml
import numpy as np
import openai
import requests
from sentence_transformers.util.quantization import quantize_embeddings

from models.calibration import load_ranges


def test_openai_client_embeddings(embed_url):
    client = openai.OpenAI(base_url=f"{embed_url}/v1", api_key="unused")
    response = client.embeddings.create(model="minilm", input=["hello world", "second text"])
    assert [item.index for item in response.data] == [0, 1]
    plain = requests.post(f"{embed_url}/v1/embeddings", json={"input": ["hello world", "second text"]}, timeout=30).json()
    for item, expected in zip(response.data, plain["data"]):
        assert np.allclose(item.embedding, expected["embedding"], atol=1e-6)
    assert response.usage.prompt_tokens == plain["usage"]["prompt_tokens"]


def test_openai_client_float_format_and_errors(embed_url):
    client = openai.OpenAI(base_url=f"{embed_url}/v1", api_key="unused", max_retries=0)
    response = client.embeddings.create(model="minilm", input="x", encoding_format="float")
    assert len(response.data[0].embedding) == 384
    try:
        client.embeddings.create(model="nope", input="x")
    except openai.NotFoundError as error:
        assert "not served" in error.message
    else:
        raise AssertionError("expected 404")


def test_openai_client_compact_types(embed_url, embed_tag):
    """``encoding_format`` int8/uint8 on the ranges stored at import and packed signs, each as
    sentence-transformers' ``quantize_embeddings`` makes it from the float vectors."""
    client = openai.OpenAI(base_url=f"{embed_url}/v1", api_key="unused", max_retries=0)
    texts = ["hello world", "second text", "ok"]
    vectors = np.array([item.embedding for item in client.embeddings.create(model="minilm", input=texts, encoding_format="float").data])
    ranges = load_ranges(bentoml.models.get(embed_tag).path)
    inside = ((vectors >= ranges[0]) & (vectors <= ranges[1])).all(axis=1)
    for kind in ("int8", "uint8", "binary", "ubinary"):
        compact = np.array([item.embedding for item in client.embeddings.create(model="minilm", input=texts, encoding_format=kind).data])
        expected = quantize_embeddings(vectors.astype(np.float32), kind, ranges=ranges if kind.endswith("int8") else None)
        assert np.array_equal(compact[inside], expected[inside]), kind
        assert compact.shape == (3, 384 if kind.endswith("int8") else 48), kind
