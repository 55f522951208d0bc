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


def test_token_ids_of_the_models_own_vocabulary_embed_as_their_texts(embed_url):
    """OpenAI's ``input`` as token ids (lists of them, or one list) and TEI's ``inputs`` mixing texts and
    ids: the ids the model's tokenizer gives a text embed as that text does."""
    from transformers import AutoTokenizer

    from models.store import default_model_dir

    texts = ["hello world", "Déjà vu, the quick fox!"]
    ids = AutoTokenizer.from_pretrained(default_model_dir())(texts)["input_ids"]
    client = openai.OpenAI(base_url=f"{embed_url}/v1", api_key="unused", max_retries=0)
    by_ids = client.embeddings.create(model="minilm", input=ids, encoding_format="float")
    by_text = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
    assert np.abs(np.array([d.embedding for d in by_ids.data]) - np.array([d.embedding for d in by_text.data])).max() <= 1e-6
    assert by_ids.usage.prompt_tokens == by_text.usage.prompt_tokens == sum(map(len, ids))
    one = client.embeddings.create(model="minilm", input=ids[0], encoding_format="float")
    assert len(one.data) == 1 and np.allclose(one.data[0].embedding, by_text.data[0].embedding, atol=1e-6)
    mixed = requests.post(f"{embed_url}/embed", json={"inputs": [texts[0], ids[1]]}, timeout=30)
    assert mixed.status_code == 200 and np.allclose(mixed.json()[1], by_text.data[1].embedding, atol=1e-6), mixed.text


def test_token_ids_of_another_tokenizer_are_refused_naming_the_fix(embed_url):
    """tiktoken's ids for "hello world" (cl100k_base: what LangChain's OpenAIEmbeddings sends at its
    defaults) fall inside MiniLM's vocabulary; they are refused, not embedded as other words."""

    def refused(body: dict, status: int = 422) -> dict:
        response = requests.post(f"{embed_url}/v1/embeddings", json=body, timeout=30)
        assert response.status_code == status, response.text
        return response.json()["error"]

    tiktoken_ids = [15339, 1917]
    error = refused({"input": [tiktoken_ids]})
    assert error["param"] == "input.0" and "check_embedding_ctx_length=False" in error["message"], error
    assert "begin with [101] and end with [102]" in error["message"]
    outside = refused({"input": [[101, 7592, 102], [101, 100257, 102]]})
    assert outside["param"] == "input.1.1" and "token id 100257 is not in the model's vocabulary (ids 0 to 30521)" in outside["message"]
    assert refused({"input": [101, *[7592] * 300, 102]}, 413)["param"] == "input.0"  # ids are not cut
    assert "no prompt" in refused({"input": [[101, 7592, 102]], "prompt": "query: "})["message"]
    assert refused({"input": [101, -1, 102]})["param"] == "input.0"
