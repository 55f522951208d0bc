"""api.catalog without a server: which served model answers a request, admission per model, and
how each is served (its Encoder's card) while that Encoder restarts."""

import asyncio
from dataclasses import replace
from types import SimpleNamespace

import aiohttp
import pytest

from api.catalog import Catalog, ServedModel
from api.errors import APIError
from api.flow import Admission
from models.spec import ModelSpec


def model(name: str, task: str, labels: tuple[str, ...] = (), source: str = "") -> ServedModel:
    spec = ModelSpec(task=task, max_length=128, labels=labels, source=source)
    tag = f"{name}:v1"
    return ServedModel(
        name,
        tag,
        0,
        spec,
        tokenizer=None,
        calls=None,
        encoder=None,
        forget=print,
        admission=Admission(name, 2),
        aliases=frozenset({name, tag, source} - {""}),
    )


CATALOG = Catalog(
    [
        model("embedder", "embed", source="org/embedder"),
        model("reranker", "classify", ("score",)),
        model("classifier", "classify", ("negative", "positive")),
        model("splade", "sparse"),
    ]
)


def refusal(name, need) -> APIError:
    with pytest.raises(APIError) as refused:
        CATALOG.pick(name, need)
    return refused.value


def test_without_a_name_the_first_model_that_does_the_task_answers():
    assert [CATALOG.pick(None, need).name for need in ("embed", "rerank", "classify", "sparse")] == [
        "embedder",
        "reranker",
        "classifier",  # listed after the reranker, yet a classifier comes first for classify
        "splade",
    ]
    assert CATALOG.named(None).name == "embedder"


def test_a_model_is_named_by_its_name_tag_or_source():
    assert {CATALOG.pick(name, "embed").name for name in ("embedder", "embedder:v1", "org/embedder")} == {"embedder"}
    assert CATALOG.pick("reranker", "classify").name == "reranker"  # a cross-encoder reads pairs on the classify routes


def test_unknown_and_wrong_models_are_refused_naming_what_is_served():
    unknown = refusal("gpt-4", "embed")
    assert (unknown.status, unknown.type, unknown.param) == (404, "model_not_found", "model")
    assert "'embedder', which does 'embed'; 'reranker', which does 'rerank'" in unknown.message
    wrong = refusal("classifier", "rerank")
    assert (wrong.status, wrong.type) == (400, "wrong_task") and "does 'classify' (2 labels), not 'rerank'" in wrong.message
    none = Catalog([CATALOG[0]])
    with pytest.raises(APIError, match="no model served here does 'sparse'"):
        none.pick(None, "sparse")


def test_admission_is_per_model():
    embedder, classifier = CATALOG[0], CATALOG[2]
    with embedder.admission(), embedder.admission():
        with pytest.raises(APIError) as refused, embedder.admission():
            pass
        assert refused.value.status == 429 and "'embedder'" in refused.value.message and refused.value.retry_after == 1
        with classifier.admission():  # the other model still admits
            assert classifier.admission.in_flight == 1
    assert embedder.admission.in_flight == classifier.admission.in_flight == 0


def answering(*answers) -> ServedModel:
    """The embedder, its Encoder's ``runtime()`` giving ``answers`` in turn: a card, an error to raise,
    or ``"hang"`` (a restarting Encoder: the arbiter's socket takes the call, nobody answers yet)."""
    queue = list(answers)

    async def runtime():
        answer = queue.pop(0)
        if answer == "hang":
            await asyncio.sleep(60)
        if isinstance(answer, Exception):
            raise answer
        return answer

    client = SimpleNamespace(to_async=SimpleNamespace(runtime=runtime))
    return replace(CATALOG[0], encoder=lambda: client)


def test_a_restarting_encoder_leaves_its_last_card_in_the_model_list():
    card, newer = {"backend": "onnx-int8"}, {"backend": "onnx"}
    served = answering(card, aiohttp.ServerDisconnectedError(), "hang", newer)

    async def ask_four_times():
        return [await served.runtime(within_s=0.1) for _ in range(4)]

    assert asyncio.run(ask_four_times()) == [card, card, card, newer]


def test_an_encoder_that_never_answered_is_a_503():
    with pytest.raises(APIError) as refused:
        asyncio.run(answering("hang").runtime(within_s=0.1))
    assert (refused.value.status, refused.value.type, refused.value.retry_after) == (503, "runner_unavailable", 1)


def test_tei_health_is_503_unhealthy_naming_each_model_whose_encoder_does_not_answer(monkeypatch):
    """``GET /health`` asks every Encoder now: a card is an answer; an error, or none in time, is not
    (the last card kept for /v1/models does not make a dead Encoder healthy)."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from api.errors import install_error_handlers
    from api.pipeline import Pipeline
    from api.routes import tei

    monkeypatch.setattr(ServedModel.answers, "__defaults__", (0.1,))  # 2 s in service: not worth waiting for here
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(tei.router)
    healthy, dead = answering(*[{"backend": "onnx"}] * 10), replace(answering({"backend": "onnx"}, "hang"), name="splade")
    with TestClient(app) as client:
        app.state.pipeline = Pipeline(Catalog([healthy, replace(CATALOG[1], encoder=healthy.encoder)]))
        assert client.get("/health").status_code == 200
        app.state.pipeline = Pipeline(Catalog([healthy, dead]))
        dead_once = client.get("/health")  # its first call answers, the second hangs
        assert dead_once.status_code == 200
        refused = client.get("/health")
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.json() == {"error": "the Encoder of 'splade' does not answer", "error_type": "Unhealthy"}
