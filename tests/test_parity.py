"""The served answers equal a direct computation on the same weights.

The embeddings server runs the default backend, onnx-int8 on a CPU: its answers must equal the
same backend run in process, and stay within the int8 accuracy gates of a direct transformers
computation (tests/test_onnx.py holds those gates on 240 sentences). The classifier server runs
torch, whose answers must equal transformers' own.
"""

import numpy as np
import requests

from models.store import default_model_dir
from tests.reference import TEXTS, backend_outputs, class_probabilities, sentence_embeddings


def served_embeddings(url: str) -> np.ndarray:
    response = requests.post(f"{url}/v1/embeddings", json={"input": TEXTS}, timeout=60)
    assert response.status_code == 200, response.text
    return np.array([item["embedding"] for item in response.json()["data"]])


def test_embeddings_equal_the_backend_in_process(embed_url, embed_tag):
    (card,) = requests.get(f"{embed_url}/v1/models", timeout=5).json()["data"]
    assert np.allclose(served_embeddings(embed_url), backend_outputs(embed_tag, card["backend"], TEXTS), atol=1e-5)


def test_embeddings_match_transformers_within_the_int8_gates(embed_url):
    served, expected = served_embeddings(embed_url), sentence_embeddings(default_model_dir(), TEXTS, max_length=256)
    cosine = (served * expected).sum(1) / np.linalg.norm(served, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.mean() >= 0.99 and cosine.min() >= 0.97, cosine


def test_each_text_alone_matches_the_batch(embed_url):
    together = requests.post(f"{embed_url}/v1/embeddings", json={"input": TEXTS}, timeout=60).json()["data"]
    for index, text in enumerate(TEXTS):
        alone = requests.post(f"{embed_url}/v1/embeddings", json={"input": text}, timeout=60).json()["data"][0]
        assert np.allclose(alone["embedding"], together[index]["embedding"], atol=1e-5)


def test_classification_matches_transformers(classify_url, classifier_dir):
    response = requests.post(f"{classify_url}/v1/classify", json={"inputs": TEXTS, "top_k": 2}, timeout=60)
    assert response.status_code == 200, response.text
    expected = class_probabilities(classifier_dir, TEXTS)
    labels = ["NEGATIVE", "POSITIVE"]
    for row, item in zip(expected, response.json()["data"]):
        served = {score["label"]: score["score"] for score in item["scores"]}
        assert np.allclose([served[label] for label in labels], row, atol=1e-4)
        assert item["label"] == labels[int(row.argmax())]
        assert np.isclose(item["score"], row.max(), atol=1e-4)
