"""The real `bentoml serve` (all processes) over real HTTP: endpoints, errors, batching, load."""

import asyncio
import base64

import numpy as np
import pytest
import requests

from harness.load import batch_histogram, closed_loop
from tests.conftest import assert_chosen_by_auto, check_timing_headers
from tests.reference import class_probabilities


def post(url, path, body):
    return requests.post(url + path, json=body, timeout=60)


def test_ready_live_metrics_and_docs(embed_url):
    assert requests.get(f"{embed_url}/readyz", timeout=5).status_code == 200
    assert requests.get(f"{embed_url}/livez", timeout=5).status_code == 200
    assert requests.get(f"{embed_url}/metrics", timeout=5).status_code == 200
    assert "text/html" in requests.get(f"{embed_url}/", timeout=5).headers["content-type"]
    spec = requests.get(f"{embed_url}/docs.json", timeout=5).json()
    assert {"/v1/classify", "/v1/embeddings", "/v1/models", "/api/v1/sentiment"} <= set(spec["paths"])


def test_models_describes_the_served_model(embed_url, embed_tag):
    (card,) = requests.get(f"{embed_url}/v1/models", timeout=5).json()["data"]
    assert card["id"] == "minilm" and card["tag"] == embed_tag and card["object"] == "model"
    assert (card["task"], card["dimensions"], card["max_length"]) == ("embed", 384, 256)
    assert_chosen_by_auto(card)


def test_embeddings_one_and_many_with_usage(embed_url):
    one = post(embed_url, "/v1/embeddings", {"input": "hello world"}).json()
    many = post(embed_url, "/v1/embeddings", {"input": ["hello world", "a second, longer text to embed"]}).json()
    assert one["object"] == "list" and one["model"] == "minilm"
    assert [item["index"] for item in many["data"]] == [0, 1]
    assert len(one["data"][0]["embedding"]) == 384
    assert np.allclose(one["data"][0]["embedding"], many["data"][0]["embedding"], atol=1e-5)
    assert one["usage"] == {"prompt_tokens": 4, "total_tokens": 4}  # [CLS] hello world [SEP]


def test_base64_encoding_is_float32_little_endian(embed_url):
    floats = post(embed_url, "/v1/embeddings", {"input": "x"}).json()["data"][0]["embedding"]
    encoded = post(embed_url, "/v1/embeddings", {"input": "x", "encoding_format": "base64"}).json()["data"][0]["embedding"]
    assert np.allclose(np.frombuffer(base64.b64decode(encoded), dtype="<f4"), floats)


def test_more_inputs_than_one_runner_batch(embed_url):
    texts = [f"text number {i}" for i in range(150)]  # > max_batch_size: split across batches
    data = post(embed_url, "/v1/embeddings", {"input": texts}).json()["data"]
    assert [item["index"] for item in data] == list(range(150))
    alone = post(embed_url, "/v1/embeddings", {"input": texts[149]}).json()["data"][0]
    assert np.allclose(alone["embedding"], data[149]["embedding"], atol=1e-5)


def test_truncation_is_reported_or_refused(embed_url, classify_url):
    long_text = "word " * 600
    ok = post(classify_url, "/v1/classify", {"inputs": ["short", long_text]}).json()
    assert [item["truncated"] for item in ok["data"]] == [False, True]
    refused = post(embed_url, "/v1/embeddings", {"input": ["short", long_text], "truncate": False})
    assert refused.status_code == 413
    assert "input 1" in refused.json()["error"]["message"]


def test_classify_labels_and_top_k_are_transformers_own(classify_url, classifier_dir):
    """Labels ranked by transformers' own probabilities on the same weights (torch serves this one)."""
    from transformers import AutoConfig

    labels = AutoConfig.from_pretrained(str(classifier_dir)).id2label
    (probabilities,) = class_probabilities(classifier_dir, ["a film"])
    expected = sorted(((labels[i], float(p)) for i, p in enumerate(probabilities)), key=lambda pair: -pair[1])
    response = post(classify_url, "/v1/classify", {"inputs": "a film", "top_k": 5})
    check_timing_headers(response)
    (item,) = response.json()["data"]
    assert [s["label"] for s in item["scores"]] == [label for label, _ in expected] and item["label"] == expected[0][0]
    assert [s["score"] for s in item["scores"]] == pytest.approx([p for _, p in expected], abs=1e-5)
    assert post(classify_url, "/v1/classify", {"inputs": "a film"}).json()["data"][0]["scores"] is None


def test_sentiment_alias_matches_classify(classify_url):
    response = post(classify_url, "/api/v1/sentiment", {"text": "what a great movie"})
    check_timing_headers(response)
    alias = response.json()
    full = post(classify_url, "/v1/classify", {"inputs": "what a great movie"}).json()["data"][0]
    assert alias == {"label": full["label"], "confidence": pytest.approx(full["score"])}


def test_wrong_task_gets_400_naming_the_served_task(embed_url, classify_url):
    response = post(embed_url, "/v1/classify", {"inputs": "x"})
    assert response.status_code == 400
    assert "'embed'" in response.json()["error"]["message"]
    response = post(classify_url, "/v1/embeddings", {"input": "x"})
    assert response.status_code == 400
    assert "'classify'" in response.json()["error"]["message"]
    # TEI's route answers in TEI's error shape, which its clients read
    response = post(embed_url, "/embed_sparse", {"inputs": "sparse please"})
    assert response.status_code == 400 and response.json()["error_type"] == "Validation", response.text
    assert "does 'embed'" in response.json()["error"] and "does 'sparse'" in response.json()["error"], response.text


def test_concurrent_load_is_batched_without_errors(embed_url):
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "models", "serve", "text"]
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=rng.integers(5, 30))) for _ in range(64)]
    before = batch_histogram(embed_url)
    result = asyncio.run(
        closed_loop(f"{embed_url}/v1/embeddings", lambda i: {"input": texts[i % 64]}, concurrency=64, requests=2000, deadline_s=240)
    )
    after = batch_histogram(embed_url)
    assert result.requests == 2000 and result.errors == 0, (result.statuses, result.sample_errors)
    # BentoML's histogram counts the Encoder's calls per batch; each call carries the texts of the
    # requests an API worker merged while its previous calls were out (serving/coalesce.py).
    calls, batches = after[0] - before[0], after[1] - before[1]
    print(f"\n2000 requests → {calls:.0f} Encoder calls → {batches:.0f} batches")
    # Measured 4.7-8 requests per call and 5.5-14 texts per batch between runs: half the low end.
    assert 2000 / calls >= 2, f"{2000 / calls:.1f} requests per call"
    assert 2000 / batches >= 3, f"{2000 / batches:.1f} texts per batch"


def test_vllms_score_with_an_embedder_is_the_cosine_of_the_two_texts_vectors(embed_url):
    texts = ["how do I reset my password", "Passwords are reset from the login page.", "Bananas are yellow."]
    vectors = np.array([item["embedding"] for item in post(embed_url, "/v1/embeddings", {"input": texts}).json()["data"]])
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    answer = post(embed_url, "/score", {"text_1": texts[0], "text_2": texts[1:]}).json()
    assert answer["object"] == "list" and answer["model"] == "minilm" and [d["object"] for d in answer["data"]] == ["score", "score"]
    assert np.allclose([d["score"] for d in answer["data"]], unit[1:] @ unit[0], atol=1e-6)
