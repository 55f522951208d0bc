"""The official cohere clients (``ClientV2``; ``Client``, v1), unchanged, against ``/v2/embed`` and ``/v1/embed``: the vectors of
/v1/embeddings, int8/uint8 and packed sign bits as sentence-transformers' ``quantize_embeddings``
makes them (int8/uint8 on the ranges stored at import), the tokens the model's own tokenizer
counts, and bad input refused in Cohere's error shape."""

import base64

import bentoml
import cohere
import numpy as np
import pytest
import requests
from sentence_transformers import SentenceTransformer
from sentence_transformers.util.quantization import quantize_embeddings
from transformers import AutoTokenizer

from models.calibration import load_ranges
from models.store import default_model_dir

TEXTS = ["How do I reset my password?", "The train to Lyon leaves at nine.", "ok", "déjà vu 🙂 " * 200]


def client(url: str) -> cohere.ClientV2:
    return cohere.ClientV2(api_key="unused", base_url=url, timeout=60)


def test_cohere_client_embeds_by_type(embed_url, embed_tag):
    kinds = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
    response = client(embed_url).embed(model="minilm", texts=TEXTS, input_type="search_document", embedding_types=kinds)
    vectors = np.array(response.embeddings.float_)
    plain = requests.post(f"{embed_url}/v1/embeddings", json={"input": TEXTS}, timeout=60).json()
    expected = np.array([item["embedding"] for item in plain["data"]])
    assert vectors.shape == (4, 384) and np.abs(vectors - expected).max() <= 1e-4
    ranges = load_ranges(bentoml.models.get(embed_tag).path)  # measured at import (models.calibration)
    served, inside = vectors.astype(np.float32), (vectors >= ranges[0]) & (vectors <= ranges[1])
    for kind, answer in (("int8", response.embeddings.int8), ("uint8", response.embeddings.uint8)):
        compact, info = np.array(answer), np.iinfo(kind)
        assert np.array_equal(compact[inside], quantize_embeddings(served, kind, ranges=ranges)[inside])
        assert np.isin(compact[~inside], [info.min, info.max]).all()  # past the ranges: clipped to an end
    assert response.embeddings.binary == quantize_embeddings(vectors, "binary").tolist()
    assert response.embeddings.ubinary == quantize_embeddings(vectors, "ubinary").tolist()
    decoded = np.array([np.frombuffer(base64.b64decode(text), dtype="<f4") for text in response.embeddings.base64])
    assert np.array_equal(decoded, vectors.astype(np.float32))
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    counted = sum(len(ids) for ids in tokenizer(TEXTS, truncation=True, max_length=256)["input_ids"])
    assert response.meta.billed_units.input_tokens == counted == plain["usage"]["prompt_tokens"]
    assert response.texts == TEXTS and response.response_type == "embeddings_by_type"


def test_cohere_output_dimension_and_truncation(embed_url):
    short = client(embed_url).embed(model="minilm", texts=TEXTS[:2], input_type="search_query", output_dimension=128)
    vectors = np.array(short.embeddings.float_)
    assert vectors.shape == (2, 128) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    start = client(embed_url).embed(model="minilm", texts=[TEXTS[3]], input_type="search_query", truncate="START")
    end = client(embed_url).embed(model="minilm", texts=[TEXTS[3]], input_type="search_query", truncate="END")
    assert start.meta.billed_units.input_tokens == end.meta.billed_units.input_tokens == 256
    with pytest.raises(cohere.core.ApiError) as refused:
        client(embed_url).embed(model="minilm", texts=[TEXTS[3]], input_type="search_query", truncate="NONE")
    assert refused.value.status_code == 413 and "256" in refused.value.body["message"]


def test_cohere_max_tokens_cuts_each_text_as_the_library_would(embed_url):
    """``max_tokens`` below the model's limit: the tokens billed and the vectors of sentence-transformers
    reading 16 tokens a text; a text already shorter is unchanged."""
    texts = [TEXTS[0], "word " * 40]
    response = client(embed_url).embed(model="minilm", texts=texts, input_type="search_query", max_tokens=16)
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    assert response.meta.billed_units.input_tokens == sum(len(ids) for ids in tokenizer(texts, truncation=True, max_length=16)["input_ids"])
    library = SentenceTransformer(str(default_model_dir()), device="cpu")
    library.max_seq_length = 16
    expected, served = library.encode(texts, convert_to_numpy=True), np.array(response.embeddings.float_)
    assert ((served * expected).sum(axis=1) >= 0.99).all()  # int8 or fp32 served (tests/test_onnx.py's gate)
    whole = np.array(client(embed_url).embed(model="minilm", texts=texts, input_type="search_query").embeddings.float_)
    assert np.allclose(served[0], whole[0], atol=1e-6) and (served[1] * whole[1]).sum() < 0.999


def test_cohere_v1_client_embeds_as_v2_in_v1s_shape(embed_url):
    v1 = cohere.Client(api_key="unused", base_url=embed_url, timeout=60)
    floats = v1.embed(model="minilm", texts=TEXTS[:3], input_type="search_document")
    v2 = client(embed_url).embed(model="minilm", texts=TEXTS[:3], input_type="search_document", embedding_types=["float", "int8"])
    assert floats.response_type == "embeddings_floats" and floats.meta.api_version.version == "1"
    assert np.abs(np.array(floats.embeddings) - np.array(v2.embeddings.float_)).max() <= 1e-6
    assert floats.meta.billed_units.input_tokens == v2.meta.billed_units.input_tokens and floats.texts == TEXTS[:3]
    typed = v1.embed(model="minilm", texts=TEXTS[:3], input_type="search_document", embedding_types=["int8"])
    assert typed.response_type == "embeddings_by_type" and typed.embeddings.int8 == v2.embeddings.int8 and typed.embeddings.float_ is None
    with pytest.raises(cohere.core.ApiError) as refused:
        v1.embed(model="minilm", texts=["ok", ""], input_type="search_query")
    assert refused.value.status_code == 422 and "texts.1" in refused.value.body["message"]
    with pytest.raises(cohere.core.ApiError) as too_long:
        v1.embed(model="minilm", texts=[TEXTS[3]], input_type="search_query", truncate="NONE")
    assert too_long.value.status_code == 413 and "256" in too_long.value.body["message"]
    for field, value in (("output_dimension", 128), ("images", ["data:image/png;base64,AA=="])):  # v2's only; texts only
        refused = requests.post(f"{embed_url}/v1/embed", json={"texts": ["ok"], field: value}, timeout=30)
        assert refused.status_code == 422 and set(refused.json()) == {"id", "message"} and field in refused.json()["message"]


BAD = [
    # (name, body, status, what the message names)
    ("no texts", {"texts": []}, 422, "texts"),
    ("an empty text", {"texts": ["ok", ""]}, 422, "texts.1"),
    ("images", {"texts": ["ok"], "images": ["data:image/png;base64,AA=="]}, 422, "images"),
    ("unknown input_type", {"texts": ["ok"], "input_type": "image"}, 422, "input_type"),
    ("unknown embedding type", {"texts": ["ok"], "embedding_types": ["int4"]}, 422, "embedding_types.0"),
    ("int8 of fewer dimensions", {"texts": ["ok"], "embedding_types": ["int8"], "output_dimension": 64}, 400, "output_dimension"),
    ("max_tokens of special tokens only", {"texts": ["ok"], "max_tokens": 2}, 400, "max_tokens"),
    ("too many dimensions", {"texts": ["ok"], "output_dimension": 1024}, 400, "384"),
    ("unknown model", {"texts": ["ok"], "model": "embed-v4.0"}, 404, "embed-v4.0"),
]


@pytest.mark.parametrize(("name", "body", "status", "named"), BAD, ids=[row[0] for row in BAD])
def test_bad_input_in_cohere_error_shape(embed_url, name, body, status, named):
    response = requests.post(f"{embed_url}/v2/embed", json=body, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()
    assert set(error) == {"id", "message"} and named in error["message"], error
