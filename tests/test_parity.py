"""The served answers equal a direct transformers computation on the same weights."""

import numpy as np
import requests

from models.store import default_model_dir
from tests.reference import TEXTS, class_probabilities, sentence_embeddings


def test_embeddings_match_transformers(embed_url):
    response = requests.post(f"{embed_url}/v1/embeddings", json={"input": TEXTS}, timeout=60)
    assert response.status_code == 200, response.text
    served = np.array([item["embedding"] for item in response.json()["data"]])
    expected = sentence_embeddings(default_model_dir(), TEXTS, max_length=256)
    cosine = (served * expected).sum(1) / np.linalg.norm(served, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() >= 0.9999, cosine


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
