"""serving/bentoml_fixes.py: each correction pinned against the installed BentoML, and proven."""

from __future__ import annotations

import asyncio
import gc
import inspect
import typing
import weakref

import bentoml
import pytest
from _bentoml_impl.server.app import ServiceAppFactory
from _bentoml_sdk.io_models import IOMixin, ensure_io_descriptor
from _bentoml_sdk.service import set_current_service
from bentoml._internal.server.http.traffic import TimeoutMiddleware
from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

from serving import bentoml_fixes
from serving.bentoml_fixes import apply, cache_media_types, current_service


def test_media_types_are_worked_out_once_per_class_and_unchanged():
    """The same media type as BentoML's own, from the second answer on without a schema built."""
    encoder_output = ensure_io_descriptor(list[tuple[bytes, typing.Any]])
    unpatched = encoder_output.mime_type()
    cache_media_types()
    cache_media_types()  # twice changes nothing
    assert [encoder_output.mime_type() for _ in range(3)] == [unpatched] * 3
    assert IOMixin.mime_type.__func__.cache_info().hits >= 2


class Request:
    """What a request's context holds (its span, its scope): only weakly referenced by the test."""


async def answered(middleware: TimeoutMiddleware, requests: int) -> list[int]:
    """``requests`` requests through ``middleware``, each answered; the statuses sent."""
    statuses = []

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    for _ in range(requests):
        await middleware({"type": "http", "path": "/", "state": {"request": Request()}}, None, send)
    return statuses


def test_a_request_answered_leaves_no_timer_and_is_released():
    """Without the fix, each request's timer (and through it the request) stays in the loop for the timeout."""
    apply()
    apply()  # twice changes nothing
    held = []

    async def app(scope: dict, receive: typing.Any, send: typing.Any) -> None:
        held.append(weakref.ref(scope["state"]["request"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def run() -> tuple[list[int], int]:
        middleware = TimeoutMiddleware(app, timeout=600)
        statuses = await answered(middleware, 50)
        loop = asyncio.get_running_loop()
        pending = [timer for timer in loop._scheduled if not timer.cancelled()]
        return statuses, len(pending)

    statuses, pending = asyncio.run(run())
    gc.collect()
    assert statuses == [200] * 50
    assert pending == 0
    assert [ref() for ref in held] == [None] * 50


def test_a_request_over_the_timeout_still_gets_504():
    apply()

    async def slow(scope: dict, receive: typing.Any, send: typing.Any) -> None:
        await asyncio.sleep(5)

    assert asyncio.run(answered(TimeoutMiddleware(slow, timeout=0.05), 1)) == [504]


@bentoml.service
class Plain:
    @bentoml.api
    def echo(self, text: str) -> str:
        return text


def test_opentelemetry_wraps_requests_only_when_a_span_would_be_exported(monkeypatch):
    """Nothing is exported by default: its spans would be for nobody, so the middleware is left out;
    with an exporter, BentoML's stack as it is."""
    apply()
    Plain.inject_config()
    assert bentoml_fixes.exported() is False  # no TEXTBENTO_OTLP_ENDPOINT, no tracing config here
    plain = [middleware.cls for middleware in ServiceAppFactory(Plain).middlewares]
    monkeypatch.setattr(bentoml_fixes, "exported", lambda: True)
    traced = [middleware.cls for middleware in ServiceAppFactory(Plain).middlewares]
    assert OpenTelemetryMiddleware in traced and OpenTelemetryMiddleware not in plain
    assert [cls for cls in traced if cls is not OpenTelemetryMiddleware] == plain
    assert TimeoutMiddleware in plain


def test_a_class_views_self_is_found_on_the_event_loop(monkeypatch):
    """FastAPI runs a plain function's dependency on a worker thread: without the fix, every request
    to a route of the service class (and to a TEI or Cohere route) takes a hop to the thread pool for ``self``."""
    from fastapi.dependencies import utils

    from api.tei_routes import ThisPipeline

    apply()
    app = FastAPI()

    class View:
        @app.get("/who")
        async def who(self) -> dict:
            return {"view": type(self).__name__}

    bentoml.asgi_app(app)(View)
    on_threads = []
    stock = utils.run_in_threadpool
    monkeypatch.setattr(utils, "run_in_threadpool", lambda call, **values: on_threads.append(call) or stock(call, **values))
    set_current_service(View())
    try:
        assert TestClient(app).get("/who").json() == {"view": "View"}
    finally:
        set_current_service(None)
    assert on_threads == []
    assert ThisPipeline.dependency is current_service
    assert not inspect.iscoroutinefunction(bentoml.get_current_service)  # every other caller keeps BentoML's own


def test_bentoml_http_metrics_label_a_path_by_its_route_and_unknown_paths_other():
    """Without the fix, each unknown path is a series of its own in BentoML's request counters (and
    of its histogram, and its in-progress gauge): any client could grow every scrape without bound."""
    import prometheus_client
    from _bentoml_impl.server.mount import PassiveMount
    from bentoml._internal.server.http.instruments import RunnerTrafficMetricsMiddleware
    from fastapi import APIRouter
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    apply()
    api, included = FastAPI(), APIRouter()

    @api.post("/v1/embeddings")
    async def embeddings() -> dict:
        return {}

    @included.get("/v1/models/{model}")
    async def model(model: str) -> dict:
        return {"model": model}  # the route sees the request's own path

    api.include_router(included)  # as the TEI and Cohere routes are, and BentoML's class views

    # As BentoML builds a service's app: its own routes, the FastAPI app mounted passively at the root.
    routes = [Route("/livez", lambda request: PlainTextResponse("ok")), PassiveMount("/", api)]
    namespace = "textbento_test_labels"
    app = Starlette(routes=routes, middleware=[Middleware(RunnerTrafficMetricsMiddleware, namespace=namespace)])
    client = TestClient(app)
    for i in range(30):
        assert client.get(f"/zz-{i}").status_code == 404
        assert client.get(f"/v1/models/m{i}").json() == {"model": f"m{i}"}
        assert client.post("/v1/embeddings").status_code == 200
        assert client.get("/v1/embeddings").status_code == 405
    counted = {
        (sample.labels["endpoint"], sample.labels["http_response_code"]): sample.value
        for family in prometheus_client.REGISTRY.collect()
        if family.name == f"{namespace}_request"
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    assert counted == {
        ("other", "404"): 30,
        ("/v1/models/{model}", "200"): 30,
        ("/v1/embeddings", "200"): 30,
        ("/v1/embeddings", "405"): 30,
    }


def test_the_metric_labels_fix_refuses_a_changed_bentoml(monkeypatch):
    from bentoml._internal.server.http import instruments

    async def changed(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)

    monkeypatch.setattr(instruments.RunnerTrafficMetricsMiddleware, "__call__", changed)
    with pytest.raises(RuntimeError, match="RunnerTrafficMetricsMiddleware changed"):
        bentoml_fixes.label_metrics_by_route()
