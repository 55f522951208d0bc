"""Classifiers and rerankers scored as their libraries score them, served for real.

A sigmoid for one logit (sentence-transformers' CrossEncoder) and for multi-label models
(transformers' ``problem_type``), a softmax otherwise; ``raw_scores`` gives the logits; pairs are
tokenized together with their token type ids; ``/v1/rerank`` ranks documents by that score. The
reference is transformers on the same (random, small) weights.
"""

from __future__ import annotations

import numpy as np
import pytest
import requests
import torch
from transformers import AutoTokenizer, BertForSequenceClassification

from harness.testmodels import build_bert_classifier
from tests.conftest import check_timing_headers, import_here, running

TEXTS = ["a query and its passage", "ok", "Déjà vu: the same text twice, then a third time."]
QUERY = "how do I reset my password"
DOCUMENTS = [
    "Open settings, then security, then reset password.",
    "Bananas are rich in potassium.",
    "Passwords can be reset from the login page.",
    "ok",
    "The weather is fine today. " * 30,
]
MULTI_LABEL = {"num_labels": 3, "problem_type": "multi_label_classification", "id2label": {0: "urgent", 1: "billing", 2: "bug"}}


def build(directory, **config) -> str:
    """A small BERT classifier (``harness.testmodels``), imported; its tag."""
    build_bert_classifier(directory, **config)
    result = import_here("--path", str(directory), "--name", directory.name)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@torch.inference_mode()
def logits(directory, first: list[str], second: list[str] | None = None) -> np.ndarray:
    """transformers' own logits: texts, or pairs (``first[i]``, ``second[i]``) with token type ids."""
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    model = BertForSequenceClassification.from_pretrained(str(directory)).eval()
    batch = tokenizer(first, second, padding=True, truncation=True, max_length=512, return_tensors="pt")
    return model(**batch).logits.numpy()


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


@pytest.fixture(scope="module")
def cross_encoder(cross_encoder_tag, cross_encoder_dir, logs):
    with running(cross_encoder_tag, logs, "cross-encoder", TEXTBENTO_BACKEND="onnx") as server:
        yield server.url, cross_encoder_dir


@pytest.fixture(scope="module")
def multi_label(tmp_path_factory, logs):
    directory = tmp_path_factory.mktemp("multi-label")
    with running(build(directory, **MULTI_LABEL), logs, "multi-label", TEXTBENTO_BACKEND="onnx") as server:
        yield server.url, directory


def post(url: str, path: str, body: dict) -> dict:
    response = requests.post(f"{url}{path}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.slow  # its server fixture is taken by name
@pytest.mark.parametrize("model", ["cross_encoder", "multi_label"])
def test_scores_are_a_sigmoid_per_label(model, request):
    url, directory = request.getfixturevalue(model)
    (card,) = requests.get(f"{url}/v1/models", timeout=5).json()["data"]
    answers = post(url, "/v1/classify", {"inputs": TEXTS, "top_k": len(card["labels"])})["data"]
    for row, item in zip(sigmoid(logits(directory, TEXTS)), answers):
        by_label = {score["label"]: score["score"] for score in item["scores"]}
        assert np.allclose([by_label[label] for label in card["labels"]], row, atol=1e-5), (by_label, row)
        assert item["label"] == card["labels"][int(row.argmax())] and np.isclose(item["score"], row.max(), atol=1e-5)
    raw = post(url, "/v1/classify", {"inputs": TEXTS, "raw_scores": True})["data"]
    assert np.allclose([item["score"] for item in raw], logits(directory, TEXTS).max(axis=1), atol=1e-5)


def test_one_logit_is_not_a_softmax(cross_encoder):
    url, _ = cross_encoder  # a softmax over one logit scores every text 1.0
    assert all(0 < item["score"] < 0.99 for item in post(url, "/v1/classify", {"inputs": TEXTS})["data"])


def test_pairs_are_tokenized_together_with_token_types(cross_encoder):
    url, directory = cross_encoder
    pairs = [[QUERY, document] for document in DOCUMENTS]
    served_scores = [item["score"] for item in post(url, "/v1/classify", {"inputs": pairs, "raw_scores": True})["data"]]
    expected = logits(directory, [QUERY] * len(DOCUMENTS), DOCUMENTS)[:, 0]
    assert np.allclose(served_scores, expected, atol=1e-5)
    without_types = logits(directory, [f"{QUERY} [SEP] {document}" for document in DOCUMENTS])[:, 0]
    assert not np.allclose(expected, without_types, atol=1e-3)  # the token types matter here


def test_scores_equal_the_cross_encoder_library(cross_encoder):
    from sentence_transformers import CrossEncoder

    url, directory = cross_encoder
    pairs = [[QUERY, document] for document in DOCUMENTS]
    expected = CrossEncoder(str(directory), device="cpu").predict(pairs)
    served = [item["score"] for item in post(url, "/v1/classify", {"inputs": pairs})["data"]]
    assert np.abs(np.array(served) - expected).max() <= 1e-5
    ranked = post(url, "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS})["results"]
    assert np.abs(np.array([result["relevance_score"] for result in ranked]) - expected[[r["index"] for r in ranked]]).max() <= 1e-5


def test_rerank_orders_documents_by_relevance(cross_encoder):
    url, directory = cross_encoder
    expected = sigmoid(logits(directory, [QUERY] * len(DOCUMENTS), DOCUMENTS)[:, 0])
    answer = post(url, "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS, "top_n": 3, "return_documents": True})
    assert [result["index"] for result in answer["results"]] == list(np.argsort(-expected, kind="stable")[:3])
    for result in answer["results"]:
        assert np.isclose(result["relevance_score"], expected[result["index"]], atol=1e-5)
        assert result["document"] == {"text": DOCUMENTS[result["index"]]}
    assert answer["usage"]["prompt_tokens"] == answer["usage"]["total_tokens"] > 0
    everything = post(url, "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS})
    assert len(everything["results"]) == len(DOCUMENTS) and "document" not in everything["results"][0]
    check_timing_headers(requests.post(f"{url}/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS}, timeout=60))


def test_vllms_score_reads_each_pair_as_the_cross_encoder(cross_encoder):
    url, _ = cross_encoder
    ranked = post(url, "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS})["results"]
    by_index = [score for _, score in sorted((r["index"], r["relevance_score"]) for r in ranked)]
    one_against_many = post(url, "/score", {"text_1": QUERY, "text_2": DOCUMENTS})
    assert [d["index"] for d in one_against_many["data"]] == list(range(len(DOCUMENTS)))
    assert (
        np.allclose([d["score"] for d in one_against_many["data"]], by_index, atol=1e-6) and one_against_many["usage"]["prompt_tokens"] > 0
    )
    pairs = [[QUERY, DOCUMENTS[0]], ["ok", DOCUMENTS[1]]]
    classified = [item["score"] for item in post(url, "/v1/classify", {"inputs": pairs})["data"]]
    pairwise = post(url, "/v1/score", {"text_1": [QUERY, "ok"], "text_2": DOCUMENTS[:2]})
    assert np.allclose([d["score"] for d in pairwise["data"]], classified, atol=1e-6)
    mismatched = requests.post(f"{url}/score", json={"text_1": [QUERY, "ok"], "text_2": DOCUMENTS}, timeout=60)
    assert mismatched.status_code == 422 and mismatched.json()["error"]["param"] == "text_1", mismatched.text
    cut = requests.post(f"{url}/score", json={"text_1": QUERY, "text_2": DOCUMENTS, "truncate_prompt_tokens": 8}, timeout=60)
    assert cut.status_code == 422 and cut.json()["error"]["param"] == "truncate_prompt_tokens", cut.text


@torch.inference_mode()
def documents_cut_scores(directory, query: str, documents: list[str], tokens: int) -> np.ndarray:
    """transformers' cross-encoder scores with each document read in its first ``tokens`` tokens (a BERT pair)."""
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    model = BertForSequenceClassification.from_pretrained(str(directory)).eval()
    query_ids = tokenizer(query, add_special_tokens=False)["input_ids"]
    scores = []
    for document in documents:
        document_ids = tokenizer(document, add_special_tokens=False)["input_ids"][:tokens]
        ids = [tokenizer.cls_token_id, *query_ids, tokenizer.sep_token_id, *document_ids, tokenizer.sep_token_id]  # BERT's pair
        types = [0] * (len(query_ids) + 2) + [1] * (len(document_ids) + 1)
        scores.append(model(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types])).logits[0, 0].item())
    return sigmoid(np.array(scores))


def test_cohere_clients_rerank_scores_as_the_cross_encoder_and_reads_max_tokens_per_doc(cross_encoder, cross_encoder_tag):
    import cohere

    url, directory = cross_encoder
    client, name = cohere.ClientV2(api_key="unused", base_url=url, timeout=60), cross_encoder_tag.partition(":")[0]
    whole = client.rerank(model=name, query=QUERY, documents=DOCUMENTS, top_n=3)
    expected = sigmoid(logits(directory, [QUERY] * len(DOCUMENTS), DOCUMENTS)[:, 0])
    assert [result.index for result in whole.results] == list(np.argsort(-expected, kind="stable")[:3])
    assert np.allclose([result.relevance_score for result in whole.results], expected[[r.index for r in whole.results]], atol=1e-5)
    assert whole.meta.billed_units.search_units == 1 and whole.id
    v1 = cohere.Client(api_key="unused", base_url=url, timeout=60).rerank(model=name, query=QUERY, documents=DOCUMENTS, top_n=3)
    assert [(r.index, r.relevance_score) for r in v1.results] == [(r.index, r.relevance_score) for r in whole.results]
    cut = client.rerank(model=name, query=QUERY, documents=DOCUMENTS, max_tokens_per_doc=3)
    expected_cut = documents_cut_scores(directory, QUERY, DOCUMENTS, 3)
    assert np.abs(expected_cut - expected).max() > 5e-5  # the cut matters here, past the tolerance below (random weights)
    assert np.allclose([result.relevance_score for result in cut.results], expected_cut[[r.index for r in cut.results]], atol=1e-5)
    with pytest.raises(cohere.core.ApiError) as refused:
        client.rerank(model=name, query=QUERY, documents=DOCUMENTS, relevant_spans={"mode": "enabled"})
    assert refused.value.status_code == 422 and "relevant_spans" in refused.value.body["message"]
    rank_fields = requests.post(f"{url}/v2/rerank", json={"query": QUERY, "documents": DOCUMENTS, "rank_fields": ["text"]}, timeout=60)
    assert rank_fields.status_code == 422 and "rank_fields" in rank_fields.json()["message"], rank_fields.text


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({"query": QUERY, "documents": []}, 422, "documents"),
        ({"query": "", "documents": ["a"]}, 422, "query"),
        ({"query": QUERY, "documents": ["a"], "top_n": 0}, 422, "top_n"),
        ({"documents": ["a"]}, 422, "query"),
        ({"query": QUERY, "documents": ["a"] * 257}, 413, "documents"),
        ({"query": QUERY, "documents": ["a"], "model": "other"}, 404, "model"),
    ],
)
def test_bad_rerank_requests_are_named(cross_encoder, body, status, param):
    response = requests.post(f"{cross_encoder[0]}/v1/rerank", json=body, timeout=30)
    assert response.status_code == status, response.text
    assert response.json()["error"]["param"].startswith(param)


def test_a_pair_has_two_texts(cross_encoder):
    for item in (["a", "b", "c"], ["a"], ["a", ""], ["a", 1]):
        response = requests.post(f"{cross_encoder[0]}/v1/classify", json={"inputs": ["fine", item]}, timeout=30)
        assert response.status_code == 422 and response.json()["error"]["param"] == "inputs.1", response.text


def test_rerank_needs_a_one_logit_model(multi_label, embed_url):
    for url in (multi_label[0], embed_url):
        response = requests.post(f"{url}/v1/rerank", json={"query": QUERY, "documents": ["a"]}, timeout=30)
        assert response.status_code == 400 and response.json()["error"]["type"] == "wrong_task", response.text
