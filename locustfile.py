"""Realistic traffic for a running textbento (``make loadtest``; ``locust -f locustfile.py`` for the web UI).

A server serves one model or several (``TEXTBENTO_MODELS``), each doing one task, so each user
reads ``GET /v1/models`` first and keeps the traffic of the tasks served: batched OpenAI-shape
embeddings, SPLADE sparse vectors, reranking, single-text classification (and its sentiment
alias), each request naming a model that does it. Texts are mostly short, some up to the model's
``max_length`` and one in ten past it, so truncation and padding cost what they cost in
production. About one request in twelve is deliberately bad (a wrong task among them); it counts
as a success only when it gets its documented 4xx with the route's JSON error shape.

Environment: ``LOCUST_HOST`` and every other ``LOCUST_*`` option (Locust's own);
``TEXTBENTO_API_KEY``, sent as a bearer token (for a gateway or BentoCloud in front);
``TEXTBENTO_RAMP=<peak users>`` for the stepped ramp below instead of ``-u``/``-r``.
Tags, for ``--tags``/``--exclude-tags``: embeddings, sparse, classify, rerank, sentiment, models, errors.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

from locust import FastHttpUser, LoadTestShape, between, tag, task
from locust.exception import StopUser

API_KEY = os.environ.get("TEXTBENTO_API_KEY")
RAMP_PEAK = int(os.environ.get("TEXTBENTO_RAMP") or 0)
# Common words: about one token each, so a text of n words is about n + 2 tokens long.
WORDS = [
    "the",
    "a",
    "film",
    "was",
    "great",
    "dull",
    "long",
    "short",
    "story",
    "actor",
    "plot",
    "music",
    "scene",
    "ending",
    "slow",
    "fast",
    "funny",
    "sad",
    "model",
    "service",
    "request",
    "answer",
    "batch",
    "token",
    "text",
    "server",
    "client",
    "fine",
    "good",
    "bad",
    "best",
    "worst",
    "really",
    "not",
    "very",
    "quite",
    "every",
    "never",
    "always",
    "today",
    "night",
    "city",
    "house",
    "water",
    "light",
    "people",
    "time",
    "year",
    "way",
]
# Each task's route and its field for the texts.
ROUTES = {
    "embed": ("/v1/embeddings", "input"),
    "classify": ("/v1/classify", "inputs"),
    "sparse": ("/embed_sparse", "inputs"),
    "multivector": ("/v1/multivector", "input"),
}


def served(model_task: str) -> Callable:
    """Marks a Locust task as traffic for a model of ``model_task`` only."""

    def mark(function: Callable) -> Callable:
        function.model_task = model_task
        return function

    return mark


def is_error(answer: dict[str, Any]) -> bool:
    """textbento's error shape, or text-embeddings-inference's on its routes (``/embed_sparse``)."""
    error = answer.get("error")
    return {"type", "message", "param"} <= error.keys() if isinstance(error, dict) else bool(error and answer.get("error_type"))


def kinds(card: dict[str, Any]) -> set[str]:
    """What a model does: its task, and reranking for a one-label classifier (a cross-encoder) or a multi-vector model (MaxSim)."""
    reranks = (card["task"] == "classify" and len(card["labels"]) == 1) or card["task"] == "multivector"
    return {card["task"]} | ({"rerank"} if reranks else set())


def bad_requests(card: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], int]]:
    """(what, path, body, expected status): careless clients of a model like ``card``, which they name."""
    path, field = ROUTES[card["task"]]
    other_path, other_field = next(route for name, route in ROUTES.items() if name != card["task"])
    model = {"model": card["id"]}
    return [
        ("empty list", path, {field: [], **model}, 422),
        ("unknown field", path, {field: "hello", "temperature": 0.5, **model}, 422),
        ("too long, truncate false", path, {field: "word " * (card["max_length"] + 16), "truncate": False, **model}, 413),
        ("wrong task", other_path, {other_field: "hello", **model}, 400),
    ]


class TextBentoClient(FastHttpUser):
    """An API client: closed loop with a short pause, traffic matched to the served model."""

    host = "http://127.0.0.1:3000"  # --host / LOCUST_HOST override it
    wait_time = between(0.05, 0.5)
    default_headers = {"Authorization": f"Bearer {API_KEY}"} if API_KEY else None

    def on_start(self) -> None:
        """Reads the served models, then keeps only the tasks they do (Locust has already applied --tags)."""
        response = self.client.get("/v1/models")
        if response.status_code != 200:  # counted as a failure already; no model card, no traffic
            raise StopUser
        cards = response.json()["data"]
        self.doing = {
            kind: [card for card in cards if kind in kinds(card)] for kind in ("embed", "sparse", "classify", "rerank", "multivector")
        }
        self.bad = [bad for card in cards for bad in bad_requests(card)]
        self.tasks = [t for t in self.tasks if not hasattr(t, "model_task") or self.doing[t.model_task]]

    def model(self, kind: str) -> dict[str, Any]:
        """A served model that does ``kind``, its card; the request names it."""
        self.card = random.choice(self.doing[kind])
        return self.card

    def text(self) -> str:
        """A text for the model last chosen."""
        limit = self.card["max_length"]
        low, high = random.choices([(3, 30), (30, limit), (limit, limit + 64)], weights=[7, 2, 1])[0]
        return " ".join(random.choices(WORDS, k=random.randint(low, max(low, high))))  # a short max_length: its ranges are empty

    def post(self, path: str, body: dict, *, status: int = 200, check: Callable | None = None, name: str | None = None) -> None:
        """A success only with ``status`` and an answer that passes ``check``; anything else is a failure."""
        with self.client.post(path, json=body, name=name or path, catch_response=True) as response:
            if response.status_code != status:
                response.failure(f"expected {status}, got {response.status_code}: {response.text[:200]}")
            elif check and not check(response.json()):
                response.failure(f"unexpected answer: {response.text[:200]}")
            else:
                response.success()

    @tag("embeddings")
    @served("embed")
    @task(10)
    def embeddings(self) -> None:
        model = self.model("embed")
        texts = [self.text() for _ in range(random.randint(2, 16))]
        body = {"input": texts, "model": model["id"], "encoding_format": random.choice(["float", "base64"])}
        self.post("/v1/embeddings", body, check=lambda answer: len(answer["data"]) == len(texts))

    @tag("embeddings")
    @served("embed")
    @task(4)
    def cohere_embed(self) -> None:
        """Cohere's v2 shape: the same vectors as floats and as packed sign bits."""
        model = self.model("embed")
        texts = [self.text() for _ in range(random.randint(2, 16))]
        body = {"texts": texts, "model": model["id"], "input_type": "search_document", "embedding_types": ["float", "ubinary"]}
        check = lambda answer: len(answer["embeddings"]["float"]) == len(answer["embeddings"]["ubinary"]) == len(texts)
        self.post("/v2/embed", body, check=check)

    @tag("sparse")
    @served("sparse")  # SPLADE
    @task(10)
    def embed_sparse(self) -> None:
        model = self.model("sparse")
        texts = [self.text() for _ in range(random.randint(2, 16))]
        check = lambda answer: len(answer) == len(texts) and all(entry["value"] > 0 for vector in answer for entry in vector)
        self.post("/embed_sparse", {"inputs": texts, "model": model["id"]}, check=check)

    @tag("multivector")
    @served("multivector")  # ColBERT
    @task(10)
    def multivector(self) -> None:
        """Token vectors of documents to index (base64, as an indexer would take them), and of a query in TEI's shape."""
        model = self.model("multivector")
        texts = [self.text() for _ in range(random.randint(2, 16))]
        body = {"input": texts, "model": model["id"], "encoding_format": "base64"}
        self.post("/v1/multivector", body, check=lambda answer: len(answer["data"]) == len(texts))
        self.post("/embed_all", {"inputs": self.text(), "input_type": "query", "model": model["id"]}, check=lambda answer: len(answer) == 1)

    @tag("classify")
    @served("classify")
    @task(8)
    def classify(self) -> None:
        model = self.model("classify")
        body = {"inputs": self.text(), "top_k": 2, "model": model["id"]}
        self.post("/v1/classify", body, check=lambda answer: len(answer["data"]) == 1 and answer["model"] == model["id"])

    @tag("rerank")
    @served("rerank")  # a one-logit cross-encoder
    @task(6)
    def rerank(self) -> None:
        model = self.model("rerank")
        documents = [self.text() for _ in range(random.randint(2, 32))]
        body = {"query": self.text(), "documents": documents, "top_n": 5, "model": model["id"]}
        self.post("/v1/rerank", body, check=lambda answer: len(answer["results"]) == min(5, len(documents)))

    @tag("sentiment")
    @served("classify")
    @task(2)
    def sentiment(self) -> None:
        model = self.model("classify")
        self.post("/api/v1/sentiment", {"text": self.text(), "model": model["id"]}, check=lambda answer: answer["label"] in model["labels"])

    @tag("models")
    @task(1)
    def models(self) -> None:
        self.client.get("/v1/models")

    @tag("errors")
    @task(1)
    def bad_request(self) -> None:
        what, path, body, status = random.choice(self.bad)
        self.post(path, body, status=status, check=is_error, name=f"{path} [{status} {what}]")


class Ramp(LoadTestShape):
    """Steps up to ``TEXTBENTO_RAMP`` users in quarters of 30 s, holds the peak 60 s, stops: where does p95 bend?

    Locust drives any shape class it finds in the locustfile, so this one is abstract unless asked for.
    """

    abstract = not RAMP_PEAK
    step_s = 30

    def tick(self) -> tuple[int, float] | None:
        step = int(self.get_run_time() // self.step_s) + 1
        if step > 6:
            return None
        users = max(1, RAMP_PEAK * min(step, 4) // 4)
        return users, users
