"""The served answers equal a direct computation on the same weights.

The embeddings server runs the default backend (``auto``'s choice here): its answers must equal the
same backend run in process, and stay within the int8 accuracy gates of a direct transformers
computation (tests/test_onnx.py holds those gates on 267 texts), and a text's vector must not
depend on the texts it was batched with. The classifier server runs
torch, whose answers must equal transformers' own.
"""

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import requests

from models.store import default_model_dir
from tests.reference import TEXTS, assert_served_as_in_process, class_probabilities, sentence_embeddings


def embed(url: str, texts: list[str] | str) -> np.ndarray:
    response = requests.post(f"{url}/v1/embeddings", json={"input": texts}, timeout=60)
    assert response.status_code == 200, response.text
    return np.array([item["embedding"] for item in response.json()["data"]])


def test_embeddings_equal_the_backend_in_process(embed_url):
    (card,) = requests.get(f"{embed_url}/v1/models", timeout=5).json()["data"]
    assert_served_as_in_process(embed(embed_url, TEXTS), card, TEXTS)


def test_embeddings_match_transformers_within_the_int8_gates(embed_url):
    served, expected = embed(embed_url, TEXTS), sentence_embeddings(default_model_dir(), TEXTS, max_length=256)
    cosine = (served * expected).sum(1) / np.linalg.norm(served, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.mean() >= 0.998 and cosine.min() >= 0.99, cosine


def test_a_text_alone_equals_the_text_in_a_mixed_batch_under_traffic(embed_url):
    """Batch invariance over HTTP: 8 texts sent alone, then inside a shuffled 64-text request of
    other lengths, while other clients keep the batcher merging their texts with these."""
    probes = ["ok", "42", TEXTS[0], TEXTS[1], TEXTS[3][:300], "naïve café, déjà vu 🙂", "x = f(y) + 3;", "word " * 300]
    others = [f"{'another text of a different length ' * (1 + i % 9)}#{i}" for i in range(56)]
    mixed = probes + others
    order = list(range(64))
    random.Random(0).shuffle(order)
    stop = threading.Event()

    def traffic(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(400):  # bounded; stopped as soon as the probes are answered
            if stop.is_set():
                return
            embed(embed_url, rng.sample(others, rng.randint(1, 12)))

    with ThreadPoolExecutor(4) as pool:
        background = [pool.submit(traffic, seed) for seed in range(4)]
        try:
            alone = np.stack([embed(embed_url, probe)[0] for probe in probes])
            together = embed(embed_url, [mixed[i] for i in order])[[order.index(i) for i in range(8)]]
        finally:
            stop.set()
        for future in background:
            future.result()
    cosine = (alone * together).sum(1) / np.linalg.norm(alone, axis=1) / np.linalg.norm(together, axis=1)
    assert cosine.min() >= 0.99999, cosine


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
