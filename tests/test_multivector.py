"""Multi-vector (PyLate / ColBERT) models: imported as PyLate saves them, served as PyLate computes them.

A tiny random-weight BERT with the embedded model's vocabulary, made a ColBERT (Dense projection to 16,
no bias) and saved by PyLate 1.6 itself, with short query and document lengths so that query expansion,
truncation and the document skiplist all show. Held to ``pylate``'s ``ColBERT.encode`` and
``colbert_scores`` (``harness.pylate_reference``, in PyLate's own stack) in process on the torch
backend and the fp32 ONNX graph, then over HTTP: ``/embed_all``, ``/v1/multivector`` (JSON and base64),
and MaxSim on ``/v1/rerank`` and TEI's ``/rerank``.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import bentoml
import numpy as np
import pytest
import requests

from harness.pylate_reference import build_colberts
from harness.testmodels import build_tiny_bert
from models.backends import load_backend, self_checked
from models.detection import UnsupportedModel
from models.inference import run_batch
from models.postprocess import maxsim, token_vectors
from models.selfcheck import MAX_MAXSIM_ERROR, MIN_COSINE
from models.spec import ModelSpec
from models.store import import_model
from models.tokenization import SideTokenizer
from tests.conftest import running
from tests.reference import damaged_int8

pytestmark = pytest.mark.slow  # PyLate runs in a subprocess of its own stack

QUERY_LENGTH, DOCUMENT_LENGTH = 12, 24
QUERIES = ["what does a fox jump over?", "ok", "  a long query, cut at twelve tokens because it has many more words than that  "]
DOCUMENTS = [
    "The quick brown fox jumps over the lazy dog!",
    "?",
    "Émojis 🙂 and accents, déjà vu: naïve café.",
    "A document that goes on and on, well past twenty-four tokens; it is cut exactly where PyLate cuts it, on the right.",
    "Foxes are small omnivores (family Canidae).",
]


# PyLate's other settings, each a model of its own: expansion tokens attended to and no prefixes; no
# expansion, Stanford's prefixes (tokens of the vocabulary already) and a skiplist of words.
VARIANTS = {
    "colbert": {},
    "attending": {"attend_to_expansion_tokens": True, "query_prefix": "", "document_prefix": ""},
    "unexpanded": {
        "do_query_expansion": False,
        "query_prefix": "[unused0]",
        "document_prefix": "[unused1]",
        "skiplist_words": ["fox", "."],
    },
}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """The directory of each variant's ColBERT, and what PyLate gives for the texts (one subprocess for all)."""
    root = tmp_path_factory.mktemp("colbert")
    bert = build_tiny_bert(root / "bert")
    lengths = {"query_length": QUERY_LENGTH, "document_length": DOCUMENT_LENGTH}
    references = build_colberts(
        bert, {root / name: {**lengths, **settings} for name, settings in VARIANTS.items()}, texts=(QUERIES, DOCUMENTS)
    )
    return root, {directory.name: reference for directory, reference in references.items()}


@pytest.fixture(scope="module")
def colbert_dir(built) -> Path:
    return built[0] / "colbert"


@pytest.fixture(scope="module")
def reference(built) -> dict:
    return built[1]["colbert"]


@pytest.fixture(scope="module")
def colbert_tag(colbert_dir) -> str:
    return str(import_model(colbert_dir, name="colbert"))


def in_process(tag: str, backend: str) -> dict:
    """Queries' and documents' token vectors and MaxSim scores from a backend run here, as the Encoder runs a batch."""
    stored = bentoml.models.get(tag)
    spec = ModelSpec.of(stored)
    loaded = load_backend(backend, stored.path, spec, threads=2)
    vectors = {}
    for side, texts in (("query", QUERIES), ("document", DOCUMENTS)):
        encoded = SideTokenizer(stored.path, spec, side).encode(texts)
        rows = run_batch(loaded, [e.ids for e in encoded], spec.pad_id, token_budget=2048)
        vectors[side] = [token_vectors(row, e.ids, spec.skiplist if side == "document" else ()) for row, e in zip(rows, encoded)]
    scores = np.array([[maxsim(query, document) for document in vectors["document"]] for query in vectors["query"]])
    return {"queries": vectors["query"], "documents": vectors["document"], "scores": scores}


def assert_as_pylate(ours: dict, reference: dict, within: float = 1e-5) -> float:
    """Same token counts, vectors within ``within``, MaxSim within ``within`` and the same order for every query; the largest difference."""
    largest = 0.0
    for key in ("queries", "documents"):
        assert [v.shape for v in ours[key]] == [v.shape for v in reference[key]], key
        largest = max(largest, *(float(np.abs(a - b).max()) for a, b in zip(ours[key], reference[key])))
    assert largest <= within, largest
    assert np.abs(np.asarray(ours["scores"]) - reference["scores"]).max() <= within
    assert (np.argsort(-np.asarray(ours["scores"]), axis=1, kind="stable") == np.argsort(-reference["scores"], axis=1, kind="stable")).all()
    return largest


def test_a_pylate_colbert_imports_with_its_settings(colbert_tag, reference):
    spec = ModelSpec.of(bentoml.models.get(colbert_tag))
    assert (spec.task, spec.max_length, spec.query_length, spec.dimensions, spec.dense, spec.normalize) == (
        "multivector",
        DOCUMENT_LENGTH,
        QUERY_LENGTH,
        16,
        ("identity",),
        True,
    )
    assert (spec.query_prefix_id, spec.document_prefix_id, spec.expansion_id, spec.attend_to_expansion) == (30522, 30523, 103, False)
    assert len(spec.skiplist) == 32  # string.punctuation, each a token of the uncased vocabulary
    # What the references show: expanded queries, documents without punctuation, cut at their lengths.
    assert {len(v) for v in reference["queries"]} == {QUERY_LENGTH}
    assert [len(v) for v in reference["documents"]][1] == 3  # "?": [CLS] [D] [SEP]
    assert max(len(v) for v in reference["documents"]) < DOCUMENT_LENGTH


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_token_vectors_and_maxsim_are_pylates(colbert_tag, reference, backend):
    assert_as_pylate(in_process(colbert_tag, backend), reference)


@pytest.mark.parametrize("variant", ["attending", "unexpanded"])
def test_pylates_other_settings_too(built, variant):
    root, references = built
    tag = str(import_model(root / variant, name=variant))
    spec = ModelSpec.of(bentoml.models.get(tag))
    if variant == "attending":
        assert (spec.query_prefix_id, spec.document_prefix_id, spec.attend_to_expansion) == (None, None, True)
    else:
        assert (spec.query_prefix_id, spec.document_prefix_id, spec.expansion_id, len(spec.skiplist)) == (1, 2, None, 2)
        assert len(references[variant]["queries"][1]) < QUERY_LENGTH  # "ok", not expanded
    assert_as_pylate(in_process(tag, "onnx"), references[variant])


def lean(rows: np.ndarray) -> np.ndarray:
    """Every token vector leant a little the same way, unit length again: each stays close to itself, MaxSim scores move."""
    rows = rows + 0.03 * np.linspace(-1, 1, rows.shape[-1], dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


@pytest.mark.int8
def test_auto_serves_int8_through_the_maxsim_gate(colbert_tag):
    """int8 passes here; one whose token vectors all lean one way (cosines kept above 0.99, scores
    moved by a few hundredths per query token) is refused by the MaxSim gate and fp32 is served."""
    stored = bentoml.models.get(colbert_tag)
    spec = ModelSpec.of(stored)
    _, (int8, *_), _ = self_checked(stored.path, spec, 2)
    assert (int8.name, int8.fidelity.passed) == ("onnx-int8", True), int8.fidelity
    assert int8.fidelity.max_maxsim_error <= MAX_MAXSIM_ERROR
    with damaged_int8(lean):
        _, (int8, *_), _ = self_checked(stored.path, spec, 2)
        assert int8.fidelity.min_cosine >= MIN_COSINE and int8.fidelity.max_maxsim_error > MAX_MAXSIM_ERROR, int8.fidelity
        assert load_backend("auto", stored.path, spec, 2).precision == "fp32"


def test_what_is_not_a_pylate_colbert_is_refused(colbert_dir, tmp_path):
    with pytest.raises(UnsupportedModel, match="import it with --task multivector"):
        import_model(colbert_dir, name="colbert-as-embed", task="embed", onnx=False)
    with pytest.raises(UnsupportedModel, match="served as PyLate saves a ColBERT"):
        import_model(Path(colbert_dir).parent / "bert", name="bert-as-colbert", task="multivector", onnx=False)
    # A Stanford checkpoint (its Dense weights beside the encoder's, no PyLate files) is not an embedder either.
    stanford = tmp_path / "stanford"
    shutil.copytree(Path(colbert_dir).parent / "bert", stanford)
    config = json.loads((stanford / "config.json").read_text())
    (stanford / "config.json").write_text(json.dumps({**config, "architectures": ["HF_ColBERT"]}))
    with pytest.raises(UnsupportedModel, match="Stanford ColBERT checkpoint"):
        import_model(stanford, name="stanford", onnx=False)
    assert not [model for model in bentoml.models.list() if model.tag.name in ("colbert-as-embed", "bert-as-colbert", "stanford")]


@pytest.fixture(scope="module")
def served(colbert_tag, colbert_dir, logs):
    """A colbert and a plain embedder (the same BERT) in one server, fp32 ONNX: vectors to compare with PyLate's."""
    embedder = str(import_model(Path(colbert_dir).parent / "bert", name="tiny-embed"))
    with running(colbert_tag, logs, "multivector", TEXTBENTO_MODELS=f"{colbert_tag},{embedder}", TEXTBENTO_BACKEND="onnx") as server:
        yield server.url


def post(url: str, path: str, body: dict) -> requests.Response:
    return requests.post(url + path, json=body, timeout=60)


def test_served_token_vectors_and_rerank_are_pylates(served, colbert_tag, reference):
    queries = post(served, "/embed_all", {"inputs": QUERIES, "input_type": "query"})
    documents = post(served, "/embed_all", {"inputs": DOCUMENTS})  # document: the default
    assert queries.status_code == documents.status_code == 200, (queries.text, documents.text)
    rerank = [post(served, "/v1/rerank", {"query": query, "documents": DOCUMENTS}).json() for query in QUERIES]
    scores = [[0.0] * len(DOCUMENTS) for _ in QUERIES]
    for row, answer in zip(scores, rerank):
        for result in answer["results"]:
            row[result["index"]] = result["relevance_score"]
    ours = {"queries": [np.array(v) for v in queries.json()], "documents": [np.array(v) for v in documents.json()], "scores": scores}
    assert_as_pylate(ours, reference)
    # Best first, as Cohere's shape has it; the usage counts every token the model read (the query expanded, punctuation too).
    assert [result["index"] for result in rerank[0]["results"]] == list(np.argsort(-reference["scores"][0], kind="stable"))
    stored = bentoml.models.get(colbert_tag)
    read = sum(e.tokens for e in SideTokenizer(stored.path, ModelSpec.of(stored), "document").encode(DOCUMENTS))
    assert rerank[0]["usage"]["prompt_tokens"] == QUERY_LENGTH + read
    tei = post(served, "/rerank", {"query": QUERIES[0], "texts": DOCUMENTS, "return_text": True}).json()
    assert [(r["index"], r["text"]) for r in tei] == [(r["index"], DOCUMENTS[r["index"]]) for r in rerank[0]["results"]]
    assert np.allclose([r["score"] for r in tei], [r["relevance_score"] for r in rerank[0]["results"]], atol=1e-6)
    scored = post(served, "/score", {"text_1": QUERIES[0], "text_2": DOCUMENTS}).json()  # vLLM's: MaxSim, in request order
    assert scored["model"] == "colbert" and np.allclose([d["score"] for d in scored["data"]], scores[0], atol=1e-6)
    two_queries = post(served, "/score", {"text_1": QUERIES[:2], "text_2": DOCUMENTS[:2]})
    assert two_queries.status_code == 422 and two_queries.json()["error"]["param"] == "text_1"


def test_cohere_v2_rerank_reads_each_document_in_its_first_max_tokens_per_doc(served):
    """A document read in its first 3 tokens scores as the document made of those 3 (words of one token each)."""
    documents = ["the cat sat on the mat today", "dogs run fast in the park"]

    def scores(body: dict) -> list[float]:
        answer = post(served, "/v2/rerank", {"query": QUERIES[0], **body})
        assert answer.status_code == 200, answer.text
        return [result["relevance_score"] for result in sorted(answer.json()["results"], key=lambda result: result["index"])]

    cut = scores({"documents": documents, "max_tokens_per_doc": 3})
    assert np.allclose(cut, scores({"documents": [" ".join(document.split()[:3]) for document in documents]}), atol=1e-6)
    assert np.abs(np.array(cut) - scores({"documents": documents})).max() > 1e-4  # the cut matters


def test_the_json_and_base64_forms_carry_the_same_vectors(served, reference):
    floats = post(served, "/v1/multivector", {"input": DOCUMENTS[:2], "model": "colbert", "prompt_name": "document"}).json()  # PyLate's ""
    packed = post(served, "/v1/multivector", {"input": DOCUMENTS[:2], "encoding_format": "base64"}).json()
    queries = post(served, "/v1/multivector", {"input": QUERIES[1], "input_type": "search_query"}).json()
    for plain, coded, expected in zip(floats["data"], packed["data"], reference["documents"]):
        assert plain["shape"] == coded["shape"] == list(expected.shape)
        decoded = np.frombuffer(base64.b64decode(coded["embedding"]), dtype="<f4").reshape(coded["shape"])
        assert np.array_equal(decoded, np.array(plain["embedding"], dtype=np.float32))
        assert np.abs(decoded - expected).max() <= 1e-5
    assert queries["data"][0]["shape"] == [QUERY_LENGTH, 16] and queries["usage"]["prompt_tokens"] == QUERY_LENGTH
    assert np.abs(np.array(queries["data"][0]["embedding"]) - reference["queries"][1]).max() <= 1e-5


@pytest.mark.parametrize(
    "path, body, status, kind",
    [
        ("/v1/embeddings", {"input": "x", "model": "colbert"}, 400, "wrong_task"),  # no one vector per text to give
        ("/v1/multivector", {"input": "x", "model": "tiny-embed"}, 400, "wrong_task"),
        ("/v1/multivector", {"input": "x", "input_type": "passage"}, 422, "invalid_request"),
        ("/v1/multivector", {"input": "x", "input_type": {}}, 422, "invalid_request"),  # not a name at all
        ("/v1/multivector", {"input": "x", "encoding_format": "int8"}, 422, "invalid_request"),
        ("/v1/multivector", {"input": DOCUMENTS[3], "truncate": False}, 413, "input_too_long"),
        ("/v1/multivector", {"input": "x", "prompt_name": "nope"}, 400, "invalid_request"),
    ],
)
def test_bad_multivector_requests_get_a_clear_4xx(served, path, body, status, kind):
    response = post(served, path, body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["type"] == kind
    if kind == "wrong_task" and "colbert" in str(body):
        assert "a vector per token" in response.json()["error"]["message"]


def test_teis_embed_all_refuses_a_model_without_token_vectors(served):
    response = post(served, "/embed_all", {"inputs": "x", "model": "tiny-embed"})
    assert response.status_code == 400 and response.json()["error_type"] == "Validation", response.text
    card = next(model for model in requests.get(f"{served}/v1/models", timeout=10).json()["data"] if model["id"] == "colbert")
    assert (card["task"], card["dimensions"], card["max_length"]) == ("multivector", 16, DOCUMENT_LENGTH)


def test_teis_root_and_info_know_a_multivector_model(served, reference):
    vectors = post(served, "/?model=colbert", {"inputs": DOCUMENTS[:1]})  # TEI's root: /embed_all
    ranked = post(served, "/", {"query": QUERIES[0], "texts": DOCUMENTS, "model": "colbert"})  # with a query: /rerank
    assert vectors.status_code == ranked.status_code == 200, (vectors.text, ranked.text)
    assert np.abs(np.array(vectors.json()[0]) - reference["documents"][0]).max() <= 1e-5
    assert [r["index"] for r in ranked.json()] == list(np.argsort(-reference["scores"][0], kind="stable"))
    info = requests.get(f"{served}/info?model=colbert", timeout=10).json()
    assert (info["model_type"], info["max_input_length"]) == ({"embedding": {"pooling": "none"}}, DOCUMENT_LENGTH)
