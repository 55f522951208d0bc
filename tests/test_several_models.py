"""One `bentoml serve` of an embedder, a reranker and a classifier (TEXTBENTO_MODELS): routing by
``model``, text-embeddings-inference's API beside OpenAI's (with huggingface_hub's real InferenceClient,
and LangChain's and LlamaIndex's integrations in their own venv), a model's label on the metrics, and one
model's Encoder killed under mixed load while the others keep answering."""

import asyncio
import signal
import threading
import time

import numpy as np
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from harness.load import closed_loop
from harness.serving import service_processes

LONG = "a " * 100 + "b " * 200  # past MiniLM's 256 tokens: which side is cut shows


@pytest.fixture(scope="module")
def server(several_server):
    return several_server


@pytest.fixture(scope="module")
def url(server):
    return server.url


def post(url, path, body, **params):
    return requests.post(f"{url}{path}", json=body, params=params, timeout=60)


def ok(response):
    assert response.status_code == 200, response.text
    return response.json()


def test_every_model_is_listed_with_its_card_in_order(url):
    cards = ok(requests.get(f"{url}/v1/models", timeout=30))["data"]
    assert [(card["id"], card["task"], len(card["labels"])) for card in cards] == [
        ("minilm", "embed", 0),
        ("cross-encoder", "classify", 1),
        ("sst2-test", "classify", 2),
    ]
    assert all(card["backend"] and card["cpu"] for card in cards)


def test_a_request_without_model_goes_to_the_first_model_that_does_its_task(url):
    assert ok(post(url, "/v1/embeddings", {"input": "x"}))["model"] == "minilm"
    assert ok(post(url, "/v1/rerank", {"query": "q", "documents": ["a", "b"]}))["model"] == "cross-encoder"
    assert ok(post(url, "/v1/classify", {"inputs": "great"}))["model"] == "sst2-test"  # a classifier before a reranker
    assert set(ok(post(url, "/api/v1/sentiment", {"text": "great"}))) == {"label", "confidence"}


def test_a_named_model_answers_and_a_wrong_or_unknown_one_is_refused(url, embed_tag, cross_encoder_tag):
    assert ok(post(url, "/v1/embeddings", {"input": "x", "model": embed_tag}))["model"] == "minilm"  # the full tag too
    pairs = ok(post(url, "/v1/classify", {"inputs": [["q", "a"]], "model": "cross-encoder"}))  # a reranker reads pairs
    assert pairs["model"] == "cross-encoder" and len(pairs["data"]) == 1
    wrong = post(url, "/v1/embeddings", {"input": "x", "model": "sst2-test"})
    assert wrong.status_code == 400 and wrong.json()["error"]["type"] == "wrong_task", wrong.text
    assert "'sst2-test' does 'classify' (2 labels), not 'embed'" in wrong.json()["error"]["message"]
    unknown = post(url, "/v1/rerank", {"query": "q", "documents": ["a"], "model": "gpt-4"})
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
    assert all(name in unknown.json()["error"]["message"] for name in ("'minilm'", "'cross-encoder'", "'sst2-test'"))
    tei_wrong = post(url, "/rerank", {"query": "q", "texts": ["a"], "model": "minilm"})  # TEI's route: TEI's shape
    assert tei_wrong.status_code == 400 and tei_wrong.json() == {
        "error": "model 'minilm' does 'embed', not 'rerank'",
        "error_type": "Validation",
    }


def test_teis_embed_answers_as_openais_route_with_its_options(url):
    texts = ["BentoML serves models", "a second text"]
    openai_vectors = np.array([item["embedding"] for item in ok(post(url, "/v1/embeddings", {"input": texts}))["data"]])
    assert np.abs(np.array(ok(post(url, "/embed", {"inputs": texts}))) - openai_vectors).max() < 1e-6
    assert len(ok(post(url, "/embed", {"inputs": texts[0]}))) == 1  # TEI's single input
    cut = np.array(ok(post(url, "/embed", {"inputs": texts, "dimensions": 8, "normalize": False})))
    assert cut.shape == (2, 8) and np.allclose(np.linalg.norm(cut, axis=1), 1, atol=1e-5)  # MiniLM normalizes: unit length anyway
    left, right = (np.array(ok(post(url, "/embed", {"inputs": LONG, "truncation_direction": side}))[0]) for side in ("Left", "right"))
    kept_left = np.array(ok(post(url, "/embed", {"inputs": "a " * 54 + "b " * 200}))[0])  # [CLS] + the last 254 tokens + [SEP]
    assert np.abs(left - kept_left).max() < 1e-6 and np.abs(left - right).max() > 1e-3
    refused = post(url, "/embed", {"inputs": LONG, "truncate": False})
    assert refused.status_code == 413 and set(refused.json()) == {"error", "error_type"}


def test_teis_predict_rerank_similarity_and_tokenize_in_teis_shapes(url):
    # /predict: all labels best first; a single input flat, a batch of [text] and [text, text] nested.
    single = ok(post(url, "/predict", {"inputs": "I like you. I love you"}))
    ours = ok(post(url, "/v1/classify", {"inputs": "I like you. I love you", "top_k": 2}))["data"][0]["scores"]
    assert single == [{"score": s["score"], "label": s["label"]} for s in ours]
    batch = ok(post(url, "/predict", {"inputs": [["I like you"], ["I like you", "I love you"]], "raw_scores": True}))
    assert len(batch) == 2 and all(len(answer) == 2 for answer in batch)
    assert ok(post(url, "/predict", {"inputs": ["I like you", "I love you"]}))[0]["label"] in ("NEGATIVE", "POSITIVE")  # a pair
    # /rerank: best first, the texts when asked; the same scores as /v1/rerank.
    texts = ["Deep Learning is not...", "Deep learning is..."]
    ranks = ok(post(url, "/rerank", {"query": "What is Deep Learning?", "texts": texts, "return_text": True}))
    cohere = ok(post(url, "/v1/rerank", {"query": "What is Deep Learning?", "documents": texts}))["results"]
    assert [(r["index"], r["score"]) for r in ranks] == [(r["index"], r["relevance_score"]) for r in cohere]
    assert [r["text"] for r in ranks] == [texts[r["index"]] for r in ranks]
    # /similarity: cosines to the source sentence.
    inputs = {"source_sentence": "What is Deep Learning?", "sentences": ["What is Machine Learning?", "What is Deep Learning?"]}
    similarity = ok(post(url, "/similarity", {"inputs": inputs}))
    assert len(similarity) == 2 and abs(similarity[1] - 1) < 1e-5 and similarity[0] < 0.99
    # /tokenize: special tokens without offsets, UTF-8 byte offsets for the rest.
    (tokens,) = ok(post(url, "/tokenize", {"inputs": "héllo world"}))
    assert [(t["text"], t["special"], t["start"], t["stop"]) for t in tokens] == [
        ("[CLS]", True, None, None),
        ("héllo", False, 0, 6),
        ("world", False, 7, 12),
        ("[SEP]", True, None, None),
    ]
    assert len(ok(post(url, "/tokenize", {"inputs": ["a", "b c"], "add_special_tokens": False}))[1]) == 2


def test_bad_input_on_teis_routes_gets_a_clear_4xx_in_teis_shape(url):
    for path, body, status, words in [
        ("/predict", {"inputs": [["a", "b", "c"]]}, 422, "pair"),  # a batch item of three texts
        ("/predict", {"inputs": []}, 422, "inputs"),
        ("/embed", {"inputs": "x", "prompt_name": "query"}, 400, "prompt_name"),  # MiniLM has no prompts
        ("/embed", {"inputs": "x", "truncation_direction": "middle"}, 422, "truncation_direction"),
        ("/rerank", {"query": "q", "texts": []}, 422, "texts"),
        ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b"]}, "model": "sst2-test"}, 400, "'embed'"),
        ("/tokenize", {"inputs": "x", "model": "gpt-4"}, 404, "gpt-4"),
        ("/", {"inputs": "x", "temperature": 1}, 422, "temperature"),
    ]:
        refused = post(url, path, body)
        assert refused.status_code == status and set(refused.json()) == {"error", "error_type"}, (path, refused.text)
        assert words in refused.json()["error"], (path, refused.text)


def test_teis_info_and_root_route_follow_each_model(url):
    info = ok(requests.get(f"{url}/info", timeout=30))
    assert info["served_model_name"] == "minilm" and info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["max_input_length"] == 256 and info["auto_truncate"] is True
    reranker = ok(requests.get(f"{url}/info", params={"model": "cross-encoder"}, timeout=30))
    assert set(reranker["model_type"]) == {"reranker"}
    classifier = ok(requests.get(f"{url}/info", params={"model": "sst2-test"}, timeout=30))
    assert classifier["model_type"]["classifier"]["label2id"] == {"NEGATIVE": 0, "POSITIVE": 1}
    # POST / does what the model does: embed for the first (an embedder), else what ?model= or the body names.
    assert np.array(ok(post(url, "/", {"inputs": ["a", "b"]}))).shape == (2, 384)
    assert ok(post(url, "/", {"inputs": "great", "parameters": {}}, model="sst2-test"))[0]["label"] in ("NEGATIVE", "POSITIVE")
    assert [r["index"] for r in ok(post(url, "/", {"query": "q", "texts": ["a", "b"], "model": "cross-encoder"}))] in ([0, 1], [1, 0])
    bad = post(url, "/", {"query": "q"}, model="cross-encoder")
    assert bad.status_code == 422 and bad.json()["error_type"] == "Validation" and "texts" in bad.json()["error"]


def test_huggingface_hubs_inference_client_unchanged(url, monkeypatch):
    from huggingface_hub import InferenceClient, constants

    # The tests' offline switch also blocks local URLs; huggingface_hub reads it at every request.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    client = InferenceClient(model=url)
    vector = client.feature_extraction("What is Deep Learning?")
    assert (
        vector.shape == (1, 384)
        and np.abs(vector[0] - np.array(ok(post(url, "/embed", {"inputs": "What is Deep Learning?"}))[0])).max() < 1e-6
    )
    similarity = client.sentence_similarity("What is Deep Learning?", other_sentences=["What is Deep Learning?", "Bananas"])
    assert abs(similarity[0] - 1) < 1e-5 and len(similarity) == 2
    classifier = InferenceClient(model=f"{url}/?model=sst2-test")
    best = classifier.text_classification("I like you")  # huggingface_hub keeps the first of TEI's flat list: the best
    assert best.label == ok(post(url, "/predict", {"inputs": "I like you", "model": "sst2-test"}))[0]["label"]


def test_langchain_and_llamaindex_integrations_unchanged(url):
    """LangChain's OpenAI, TEI (langchain-huggingface) and Cohere embeddings and LlamaIndex's TEI embeddings, set up
    as their docs say, in their own venv (harness/client_matrix.py): /v1/embeddings' vectors; LangChain's Cohere
    reranker: /v1/rerank's scores; LangChain's OpenAIEmbeddings at its defaults sends tiktoken's ids: 422 naming its fix."""
    from harness import client_matrix

    texts, query = ["How do I reset my password?", "The train to Lyon leaves at nine.", "ok"], "password reset"
    documents = ["Reset it from the login page.", "Trains leave hourly.", "Bananas are yellow.", "Passwords expire yearly."]
    found = client_matrix.run(url, "minilm", "cross-encoder", texts, query, documents)
    served = np.array([item["embedding"] for item in ok(post(url, "/v1/embeddings", {"input": [*texts, query]}))["data"]])
    for client in ("langchain-openai", "langchain-huggingface", "langchain-cohere", "llama-index-tei"):
        assert np.abs(np.array(found[client]["documents"]) - served[:-1]).max() <= 1e-6, client
        assert np.abs(np.array(found[client]["query"]) - served[-1]).max() <= 1e-6, client
    defaults = found["langchain-openai at its defaults"]
    assert defaults["status"] == 422 and "check_embedding_ctx_length=False" in defaults["message"], defaults
    ranked = ok(post(url, "/v1/rerank", {"model": "cross-encoder", "query": query, "documents": documents, "top_n": 3}))["results"]
    assert found["langchain-cohere rerank"] == [[result["index"], result["relevance_score"]] for result in ranked]


def test_tei_health_and_decode(url, classifier_dir):
    from transformers import AutoTokenizer

    from models.store import default_model_dir

    health = requests.get(f"{url}/health", timeout=30)
    assert health.status_code == 200 and health.content == b""
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    ids = [tokenizer("Déjà vu, the quick fox!")["input_ids"], tokenizer("ok")["input_ids"]]
    assert ok(post(url, "/decode", {"ids": ids})) == [tokenizer.decode(one, skip_special_tokens=True) for one in ids]
    kept = ok(post(url, "/decode", {"ids": ids[0], "skip_special_tokens": False}))
    assert kept == [tokenizer.decode(ids[0])] and kept[0].startswith("[CLS]")
    sst2 = AutoTokenizer.from_pretrained(str(classifier_dir))  # the model named decodes, with its own tokenizer
    assert ok(post(url, "/decode", {"ids": ids[1], "model": "sst2-test"})) == [sst2.decode(ids[1], skip_special_tokens=True)]
    outside = post(url, "/decode", {"ids": [ids[1], [101, len(tokenizer), 102]]})
    assert outside.status_code == 422 and outside.json()["error_type"] == "Validation", outside.text
    assert outside.json()["error"].startswith(f"ids.1.1: token id {len(tokenizer)} is not in the model's vocabulary")
    negative = post(url, "/decode", {"ids": [-1]})
    assert negative.status_code == 422 and "ids.0.0" in negative.json()["error"], negative.text
    too_many = post(url, "/decode", {"ids": [[100] * 65537] * 2})  # past TEXTBENTO_MAX_TOKENIZE_TOKENS (2^17) in all
    assert too_many.status_code == 413 and "131074 token ids" in too_many.json()["error"], too_many.text


def test_each_models_batches_carry_its_name(url):
    post(url, "/v1/rerank", {"query": "q", "documents": ["a"]})
    text = requests.get(f"{url}/metrics", timeout=30).text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    batched = {s.labels["model"] for s in families["textbento_batch_texts"].samples if s.name.endswith("_count") and s.value}
    assert batched == {"minilm", "cross-encoder", "sst2-test"}
    served_backends = {s.labels["model"] for s in families["textbento_backend"].samples}
    assert served_backends == {"minilm", "cross-encoder", "sst2-test"}


def test_a_killed_models_encoder_spares_the_other_models(server):
    """The reranker's Encoder SIGKILLed under mixed load: the embedder's and the classifier's requests
    all get 200 meanwhile; the reranker's get 200 (resent to the replacement) or a 503, and come back."""
    loads = {
        "embed": ("/v1/embeddings", lambda i: {"input": f"text {i}"}),
        "classify": ("/v1/classify", lambda i: {"inputs": f"text {i}"}),
        "rerank": ("/v1/rerank", lambda i: {"query": "q", "documents": [f"text {i}", "other"]}),
    }
    (victim,) = service_processes(server.process, "encoder-cross-encoder")
    results = {}

    async def mixed():
        runs = [closed_loop(f"{server.url}{path}", body, concurrency=6, requests=10**6, deadline_s=14) for path, body in loads.values()]
        results.update(zip(loads, await asyncio.gather(*runs)))

    thread = threading.Thread(target=lambda: asyncio.run(mixed()))
    thread.start()
    time.sleep(4)
    victim.send_signal(signal.SIGKILL)
    thread.join()
    for name, result in results.items():
        print(f"\n{name}: {result.summary()}")
    assert set(results["embed"].statuses) == {200} and set(results["classify"].statuses) == {200}
    assert set(results["rerank"].statuses) <= {200, 503} and results["rerank"].statuses[200] > 0
    deadline = time.monotonic() + 90
    while post(server.url, "/v1/rerank", {"query": "q", "documents": ["a"]}).status_code != 200:
        assert time.monotonic() < deadline, "the reranker did not come back"
        time.sleep(1)
    assert [p.pid for p in service_processes(server.process, "encoder-cross-encoder")] != [victim.pid]
