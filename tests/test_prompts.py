"""Embedding options beside OpenAI's: sentence-transformers prompts (named, free, the model's default, by
role as NVIDIA NIM's ``input_type``, by Jina's ``task``), NIM's and Jina's other fields, and Matryoshka
``dimensions``, through plain HTTP and the official openai client (``extra_body``)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import openai
import pytest
import requests

from models.store import default_model_dir
from tests.conftest import import_here, running

PROMPTS = {"query": "query: ", "passage": "passage: "}
TEXTS = ["how do I reset my password", "ok"]


@pytest.fixture(scope="module")
def prompted(tmp_path_factory, logs):
    """The embedded MiniLM with prompts and a default prompt in its sentence-transformers config, and
    without its Normalize module (its vectors are not unit length)."""
    directory = tmp_path_factory.mktemp("prompted") / "model"
    shutil.copytree(default_model_dir(), directory)
    (directory / "config_sentence_transformers.json").write_text(json.dumps({"prompts": PROMPTS, "default_prompt_name": "query"}))
    modules = json.loads((directory / "modules.json").read_text())
    (directory / "modules.json").write_text(json.dumps([m for m in modules if not m["type"].endswith("Normalize")]))
    result = import_here("--path", str(directory), "--name", "prompted")
    assert result.returncode == 0, result.stderr
    with running(result.stdout.strip(), logs, "prompted", TEXTBENTO_BACKEND="onnx") as server:
        yield server.url, directory


def embed(url: str, texts: list[str], **options) -> np.ndarray:
    response = requests.post(f"{url}/v1/embeddings", json={"input": texts, **options}, timeout=60)
    assert response.status_code == 200, response.text
    return np.array([item["embedding"] for item in response.json()["data"]])


def test_prompts_are_applied_as_sentence_transformers_applies_them(prompted):
    from sentence_transformers import SentenceTransformer

    url, directory = prompted
    model = SentenceTransformer(str(directory), device="cpu")
    assert np.abs(embed(url, TEXTS) - model.encode(TEXTS)).max() <= 1e-5  # the default prompt
    assert np.abs(embed(url, TEXTS, prompt_name="passage") - model.encode(TEXTS, prompt_name="passage")).max() <= 1e-5
    assert np.abs(embed(url, TEXTS, prompt="x: ") - model.encode(TEXTS, prompt="x: ")).max() <= 1e-5


def test_the_default_prompt_applies_and_can_be_replaced(prompted):
    prompted_url, _ = prompted
    raw = embed(prompted_url, TEXTS, prompt="")
    assert np.allclose(embed(prompted_url, TEXTS), embed(prompted_url, [f"query: {text}" for text in TEXTS], prompt=""), atol=1e-6)
    assert np.allclose(embed(prompted_url, TEXTS, prompt_name="passage"), embed(prompted_url, TEXTS, prompt="passage: "), atol=1e-6)
    assert not np.allclose(raw, embed(prompted_url, TEXTS), atol=1e-3)
    (card,) = requests.get(f"{prompted_url}/v1/models", timeout=5).json()["data"]
    assert (card["prompts"], card["default_prompt_name"], card["pooling"]) == (PROMPTS, "query", "mean")


@pytest.mark.parametrize(
    "options, param, words",
    [
        ({"prompt_name": "title"}, "prompt_name", "passage, query"),
        ({"prompt_name": "query", "prompt": "x"}, "prompt", "not several"),
        ({"input_type": "query", "prompt_name": "query"}, "prompt_name", "not several"),
        ({"task": "retrieval.query"}, "task", "passage, query"),
        ({"encoding_format": "float", "embedding_type": "base64"}, "embedding_type", "differ"),
    ],
)
def test_bad_prompt_options_are_named(prompted, options, param, words):
    prompted_url, _ = prompted
    response = requests.post(f"{prompted_url}/v1/embeddings", json={"input": "x", **options}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == param and words in response.text


def test_nim_and_jina_fields_map_onto_prompts_truncation_formats_and_normalization(prompted):
    prompted_url, _ = prompted
    for role, name in (("query", "query"), ("passage", "passage"), ("search_document", "passage")):
        assert np.allclose(embed(prompted_url, TEXTS, input_type=role), embed(prompted_url, TEXTS, prompt_name=name), atol=1e-6)
        assert np.allclose(embed(prompted_url, TEXTS, task=name), embed(prompted_url, TEXTS, prompt_name=name), atol=1e-6)
    for path, version in (("/v2/embed", "2"), ("/v1/embed", "1")):  # Cohere's roles, on both of Cohere's embed routes
        cohere = requests.post(f"{prompted_url}{path}", json={"texts": TEXTS, "input_type": "search_query"}, timeout=60).json()
        vectors = cohere["embeddings"]["float"] if version == "2" else cohere["embeddings"]
        assert np.allclose(vectors, embed(prompted_url, TEXTS, prompt_name="query"), atol=1e-6), path
    long = "a " * 100 + "b " * 300  # past MiniLM's 256 tokens: which side is cut shows
    end, start = embed(prompted_url, [long], truncate="END"), embed(prompted_url, [long], truncate="START")
    assert np.allclose(end, embed(prompted_url, [long]), atol=1e-6) and not np.allclose(start, end, atol=1e-3)
    left = requests.post(f"{prompted_url}/embed", json={"inputs": long, "truncation_direction": "left", "normalize": False}, timeout=60)
    assert np.allclose(start, left.json(), atol=1e-5)
    refused = requests.post(f"{prompted_url}/v1/embeddings", json={"input": long, "truncate": "NONE"}, timeout=60)
    assert refused.status_code == 413 and refused.json()["error"]["param"] == "input.0"
    own, unit = embed(prompted_url, TEXTS), embed(prompted_url, TEXTS, normalized=True)
    assert not np.allclose(np.linalg.norm(own, axis=1), 1, atol=1e-3) and np.allclose(
        unit, own / np.linalg.norm(own, axis=1)[:, None], atol=1e-6
    )
    as_jina = requests.post(f"{prompted_url}/v1/embeddings", json={"input": TEXTS, "embedding_type": "base64"}, timeout=60).json()
    as_openai = requests.post(f"{prompted_url}/v1/embeddings", json={"input": TEXTS, "encoding_format": "base64"}, timeout=60).json()
    assert as_jina["data"] == as_openai["data"]
    chunked = requests.post(f"{prompted_url}/v1/embeddings", json={"input": TEXTS, "late_chunking": True}, timeout=60)
    assert chunked.status_code == 422 and chunked.json()["error"]["param"] == "late_chunking"


def test_prompt_name_on_a_model_without_prompts(embed_url):
    response = requests.post(f"{embed_url}/v1/embeddings", json={"input": "x", "prompt_name": "query"}, timeout=30)
    assert response.status_code == 400 and "prompts: none" in response.json()["error"]["message"]


def test_matryoshka_dimensions_cut_and_renormalize(embed_url):
    full, cut = embed(embed_url, TEXTS), embed(embed_url, TEXTS, dimensions=128)
    assert cut.shape == (2, 128) and np.allclose(np.linalg.norm(cut, axis=1), 1, atol=1e-5)
    expected = full[:, :128] / np.linalg.norm(full[:, :128], axis=1, keepdims=True)
    assert np.allclose(cut, expected, atol=1e-5)
    assert requests.post(f"{embed_url}/v1/embeddings", json={"input": "x", "dimensions": 385}, timeout=30).status_code == 400


def test_the_openai_client_sends_both(embed_url):
    client = openai.OpenAI(base_url=f"{embed_url}/v1", api_key="unused")
    response = client.embeddings.create(model="minilm", input=TEXTS, dimensions=64, extra_body={"prompt": "query: "})
    expected = embed(embed_url, [f"query: {text}" for text in TEXTS], dimensions=64)
    assert np.allclose([item.embedding for item in response.data], expected, atol=1e-6)
