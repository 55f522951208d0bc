"""Softmax, labels, pooling and normalisation against hand-computed values."""

import numpy as np

from models.postprocess import l2_normalize, pool, ranked_labels, scores, sentence_embeddings, softmax

HIDDEN = np.array([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]], dtype=np.float32)
MASK = np.array([[1, 1, 0]])


def test_mean_pooling_ignores_padding():
    assert pool(HIDDEN, MASK, "mean").tolist() == [[2.0, 3.0]]


def test_cls_and_max_pooling():
    assert pool(HIDDEN, MASK, "cls").tolist() == [[1.0, 2.0]]
    assert pool(HIDDEN, MASK, "max").tolist() == [[3.0, 4.0]]


def test_l2_normalize_unit_rows_and_zero_rows():
    out = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert np.allclose(out, [[0.6, 0.8], [0.0, 0.0]])


def test_sentence_embeddings_normalizes_when_asked():
    assert np.allclose(np.linalg.norm(sentence_embeddings(HIDDEN, MASK, "mean", True), axis=1), 1.0)
    assert sentence_embeddings(HIDDEN, MASK, "mean", False).tolist() == [[2.0, 3.0]]


def test_softmax_is_stable_and_sums_to_one():
    probabilities = softmax(np.array([[1000.0, 1000.0], [0.0, np.log(3.0)]]))
    assert np.allclose(probabilities, [[0.5, 0.5], [0.25, 0.75]])


def test_ranked_labels_most_probable_first():
    ranked = ranked_labels(np.array([0.1, 0.7, 0.2]), ["a", "b", "c"], top_k=2)
    assert [label for label, _ in ranked] == ["b", "c"]
    assert np.isclose(ranked[0][1], 0.7)


def test_sigmoid_scores_for_one_logit_and_multi_label_models():
    logits = np.array([[-800.0, 0.0, 800.0], [2.0, -1.0, 0.5]])
    assert np.allclose(scores(logits, "sigmoid"), 1 / (1 + np.exp(-np.clip(logits, -50, 50))))
    assert np.isfinite(scores(logits, "sigmoid")).all()
    assert np.allclose(scores(logits, "softmax").sum(axis=1), 1.0)
