"""The official openai client, unchanged, against /v1/embeddings (it asks for base64 by default)."""

import numpy as np
import openai
import requests


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
