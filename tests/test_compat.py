"""serving/compat: every patch of another library behind one version-checked ``apply()``.

Per patch, two kinds of test. "Still needed": the upstream behaviour it corrects, read from the library's
own unpatched code; when an upgrade fixes it upstream, that test fails and its message names the patch
that can go. "Works": the correction, proven with the patch applied. No server starts here.
"""

from __future__ import annotations

import ast
import asyncio
import collections
import contextlib
import gc
import importlib.util
import inspect
import os
import re
import signal
import subprocess
import sys
import time
import types
import typing
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import aiohttp
import bentoml
import psutil
import pytest
import uvicorn
from _bentoml_impl.client.proxy2 import AsyncClient
from _bentoml_impl.server.app import ServiceAppFactory
from _bentoml_sdk.io_models import IOMixin, ensure_io_descriptor
from bentoml._internal.marshal import dispatcher
from bentoml._internal.server.http import instruments
from bentoml._internal.server.http.traffic import TimeoutMiddleware
from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

from serving import compat
from serving.compat import (
    bentoml_arbiter,
    bentoml_batcher,
    bentoml_internals,
    bentoml_metrics,
    bentoml_requests,
    openvino_telemetry,
    uvicorn_connections,
)
from serving.compat.bentoml_requests import cache_media_types
from serving.connections import limit_connections
from serving.settings import ENCODER_KEEP_ALIVE_S

ROOT = Path(__file__).resolve().parent.parent


def can_go(patch: str) -> str:
    return f"upstream no longer does what {patch} corrects: the patch can go"


# The boundary: one apply(), its version check, and no library internals anywhere else.


def test_apply_refuses_a_version_its_patches_were_not_written_for(monkeypatch):
    """A message that names the library, the installed and the expected version, and patches nothing."""
    monkeypatch.setattr(compat, "installed_version", lambda library: "1.4.41" if library == "bentoml" else compat.PATCHED[library])
    monkeypatch.setattr(bentoml_batcher, "apply", lambda: pytest.fail("patched before the version check"))
    with pytest.raises(compat.IncompatibleVersion, match=re.escape("bentoml 1.4.41 is installed, serving/compat patches bentoml 1.4.40")):
        compat.apply()


def test_apply_names_every_mismatched_library(monkeypatch):
    monkeypatch.setattr(compat, "installed_version", lambda library: "0.0.1")
    with pytest.raises(compat.IncompatibleVersion) as refused:
        compat.check_versions()
    assert all(
        f"{library} 0.0.1 is installed, serving/compat patches {library} {v}" in str(refused.value) for library, v in compat.PATCHED.items()
    )


def test_an_optional_library_not_installed_is_not_refused(monkeypatch):
    """OpenVINO is not in the CPU image: without it, nothing of it is checked or patched."""
    monkeypatch.setattr(compat, "installed_version", lambda library: compat.WRITTEN_FOR.get(library))
    compat.check_versions()
    monkeypatch.setattr(compat, "installed_version", lambda library: None)
    with pytest.raises(compat.IncompatibleVersion, match="bentoml None is installed"):
        compat.check_versions()


def test_apply_accepts_the_installed_versions_and_applies_twice_alike():
    compat.apply()
    compat.apply()
    assert dispatcher.CorkDispatcher.controller is bentoml_batcher.dispatch_when_free and uvicorn_connections.applied()


def pinned(path: Path) -> dict[str, str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return dict(line.split("==") for line in lines if "==" in line)


def test_the_versions_written_for_are_the_pinned_ones():
    """A pin moved without the patches checked against it would refuse to start: this says so first."""
    pins = {**pinned(ROOT / "constraints.txt"), **pinned(ROOT / "requirements/serve-cpu.txt")}
    assert {library: pins[library] for library in compat.PATCHED} == compat.PATCHED


INTERNALS = ("bentoml._internal", "_bentoml_impl", "_bentoml_sdk", "uvicorn", "openvino_telemetry")


def test_no_module_outside_compat_imports_a_librarys_internals():
    paths = [
        ROOT / "service.py",
        *(path for package in ("api", "models", "serving", "harness", "bulk") for path in (ROOT / package).rglob("*.py")),
    ]
    imports = [
        (path.relative_to(ROOT), name)
        for path in paths
        if "compat" not in path.relative_to(ROOT).parts
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""] if node.level == 0 else []
        )
        if any(name == internal or name.startswith(internal + ".") for internal in INTERNALS)
    ]
    assert imports == []


# bentoml_batcher: the adaptive batcher without its learned idle wait.


def burst_stats() -> list[tuple[int, float, float]]:
    return [(8, 0.05, 0.2)] * 20  # a burst: every call waited 200 ms behind the batch before it


def test_still_needed_bentoml_batcher_stock_optimizer_learns_the_bursts_wait():
    learned = dispatcher.Optimizer(60.0)
    learned.o_stat.extend(burst_stats())
    learned.trigger_refresh()
    assert learned.wait > 0.1, can_go("bentoml_batcher (the learned idle wait)")


def test_the_patched_batcher_exists_and_uses_the_fix():
    """Fails loudly if a BentoML upgrade moved what the patch replaces (it would silently do nothing)."""
    assert hasattr(dispatcher, "CorkDispatcher") and hasattr(dispatcher, "Optimizer")
    assert hasattr(dispatcher.Optimizer, "trigger_refresh") and hasattr(dispatcher.Optimizer, "log_outbound")
    bentoml_batcher.apply()
    assert dispatcher.CorkDispatcher.controller is bentoml_batcher.dispatch_when_free
    assert "self.optimizer.wait" in inspect.getsource(bentoml_batcher.stock_controller)  # what the stock loop idles on


def test_calls_from_the_socket_hop_reach_the_batcher_of_the_service_being_served(monkeypatch):
    """``batcher`` feeds a call to the ``batch_infer`` of the factory that created this process's service
    instance, with the arguments BentoML's HTTP route gives it (``ServiceAppFactory.api_endpoint``)."""
    assert "output = await self.batch_infer(name, call_args, call_kwargs)" in inspect.getsource(bentoml_batcher.ServiceAppFactory)
    created, fed = [], []

    async def stock(factory, app):
        created.append(bentoml_batcher.serving[0] is factory)

    class Factory:
        async def batch_infer(self, name, args, kwargs):
            fed.append((name, args, kwargs))
            return "answer"

    monkeypatch.setattr(bentoml_batcher, "stock_create_instance", stock)
    monkeypatch.setattr(bentoml_batcher, "serving", [])
    with pytest.raises(RuntimeError):
        bentoml_batcher.batcher("encode")
    bentoml_batcher.apply()
    assert bentoml_batcher.ServiceAppFactory.create_instance is bentoml_batcher.kept_create_instance
    factory = Factory()
    asyncio.run(bentoml_batcher.kept_create_instance(factory, app=None))
    assert created == [True]  # kept before the instance (whose __init__ calls ``batcher``) is created
    assert asyncio.run(bentoml_batcher.batcher("encode")([b"ids"])) == "answer" and fed == [("encode", ([b"ids"],), {})]


class CountedSema(dispatcher.NonBlockSema):
    """The dispatcher's one-batch-at-a-time semaphore, counting how often its loop asks whether a batch runs."""

    def __init__(self) -> None:
        super().__init__(1)
        self.asked = 0

    def is_locked(self) -> bool:
        self.asked += 1
        return super().is_locked()


def dispatcher_with(controller, outbound_call, max_latency_ms: int = 60_000):
    """A dispatcher of ``max_latency_ms`` whose loop is ``controller`` (and whose batches end with ``outbound_call``),
    fed a model whose calls are (name, seconds) pairs: a batch takes its longest call's seconds and answers the names."""
    Dispatcher = type("Dispatcher", (dispatcher.CorkDispatcher,), {"controller": controller, "outbound_call": outbound_call})
    batcher, sema = Dispatcher(max_latency_ms, 64, fallback=lambda: "shed", get_batch_size=lambda data: 1), CountedSema()
    batcher._sema = sema
    started: dict[str, float] = {}

    async def model(calls):
        now = time.monotonic()
        for name, _ in calls:
            started[name] = now
        await asyncio.sleep(max(seconds for _, seconds in calls))
        return [name for name, _ in calls]

    return Fed(batcher(model), sema, started, batcher)


class Fed(NamedTuple):
    call: Callable  # the batched call, as BentoML's route makes it
    sema: CountedSema
    started: dict[str, float]  # when each call's batch started, by name
    dispatcher: dispatcher.CorkDispatcher


async def trained(call) -> None:
    """BentoML's batcher trains its latency model on its first dozen calls (polling as it does): past them."""
    for number in range(12):
        assert await call((f"training {number}", 0)) == f"training {number}"


async def held_after_a_burst(fed: Fed) -> float:
    """Seconds a lone call waited to start once the optimizer learnt a burst's 200 ms wait (``burst_stats``)."""
    await trained(fed.call)
    fed.dispatcher.optimizer.o_stat.extend(burst_stats())
    fed.dispatcher.optimizer.trigger_refresh()
    assert fed.dispatcher.optimizer.wait > 0.1
    sent = time.monotonic()
    assert await fed.call(("lone", 0)) == "lone"
    return fed.started["lone"] - sent


def test_after_a_burst_a_lone_call_is_dispatched_at_once_though_the_optimizer_learnt_a_wait():
    stock = dispatcher_with(bentoml_batcher.stock_controller, bentoml_batcher.stock_outbound_call)
    patched = dispatcher_with(bentoml_batcher.dispatch_when_free, bentoml_batcher.outbound_call_then_wake)
    assert asyncio.run(held_after_a_burst(stock)) > 0.1  # the stock loop idles on the learnt wait
    assert asyncio.run(held_after_a_burst(patched)) < 0.05


async def while_a_batch_runs(fed: Fed, queued: list[str], batch_s: float = 0.3):
    """How often the loop asked whether the model is free while a ``batch_s`` batch ran with ``queued`` calls waiting,
    every call's answer, and each queued call's start after the batch's end (0 for one shed)."""
    call, sema, started, _ = fed
    await trained(call)
    asked = sema.asked
    running = asyncio.ensure_future(call(("running", batch_s)))
    await asyncio.sleep(0.02)
    waiting = [asyncio.ensure_future(call((name, 0))) for name in queued]
    answers = await asyncio.gather(running, *waiting)
    ended = started["running"] + batch_s
    return sema.asked - asked, answers, {name: started.get(name, ended) - ended for name in queued}


def test_still_needed_bentoml_batcher_stock_dispatch_loop_polls_while_a_batch_runs():
    batcher = dispatcher_with(bentoml_batcher.stock_controller, bentoml_batcher.stock_outbound_call)
    asked, answers, _ = asyncio.run(while_a_batch_runs(batcher, queued=["next"]))
    assert answers == ["running", "next"]
    assert asked > 30, can_go("bentoml_batcher (the dispatch loop's polling)")  # every millisecond or so of 0.3 s


def test_the_next_batch_is_dispatched_when_the_running_one_ends_with_no_polling_meanwhile():
    batcher = dispatcher_with(bentoml_batcher.dispatch_when_free, bentoml_batcher.outbound_call_then_wake)
    asked, answers, after_the_end = asyncio.run(while_a_batch_runs(batcher, queued=["next", "and next"]))
    assert answers == ["running", "next", "and next"]
    assert asked <= 6  # woken twice by arrivals, once by the end (the stock loop: hundreds of times)
    assert after_the_end["next"] == after_the_end["and next"] and 0 <= after_the_end["next"] < 0.1  # together, at once


def test_a_call_queued_past_max_latency_is_shed_while_the_batch_runs_not_after_it():
    """The loop wakes for the oldest call's time to run out: alone (no arrival wakes it) and behind another call."""
    for queued in (["oldest"], ["oldest", "newer"]):
        batcher = dispatcher_with(bentoml_batcher.dispatch_when_free, bentoml_batcher.outbound_call_then_wake, max_latency_ms=100)
        asked, answers, _ = asyncio.run(while_a_batch_runs(batcher, queued=queued, batch_s=0.6))
        assert answers[:2] == ["running", "shed"], queued  # the 503's fallback, while the 0.6 s batch ran
        assert asked <= 8


# bentoml_requests: a media type per class.


def test_still_needed_bentoml_requests_stock_media_type_builds_a_json_schema_per_answer(monkeypatch):
    encoder_output = ensure_io_descriptor(list[tuple[bytes, typing.Any]])
    built, schema = [], encoder_output.model_json_schema
    monkeypatch.setattr(encoder_output, "model_json_schema", lambda *args, **kwargs: built.append(1) or schema(*args, **kwargs))
    for _ in range(3):
        bentoml_requests.STOCK_MIME_TYPE(encoder_output)
    assert len(built) == 3, can_go("bentoml_requests.cache_media_types")


def test_media_types_are_worked_out_once_per_class_and_unchanged():
    """The same media type as BentoML's own, from the second answer on without a schema built."""
    encoder_output = ensure_io_descriptor(list[tuple[bytes, typing.Any]])
    unpatched = encoder_output.mime_type()
    cache_media_types()
    cache_media_types()  # twice changes nothing
    assert [encoder_output.mime_type() for _ in range(3)] == [unpatched] * 3
    assert IOMixin.mime_type.__func__.cache_info().hits >= 2


# bentoml_requests: the timeout middleware's timer cancelled.


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


def timers_left(requests: int, held: list) -> tuple[list[int], int]:
    """``requests`` answered requests through BentoML's timeout middleware: their statuses, and the timers still pending."""

    async def app(scope: dict, receive: typing.Any, send: typing.Any) -> None:
        held.append(weakref.ref(scope["state"]["request"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def run() -> tuple[list[int], int]:
        middleware = TimeoutMiddleware(app, timeout=600)
        statuses = await answered(middleware, requests)
        loop = asyncio.get_running_loop()
        pending = [timer for timer in loop._scheduled if not timer.cancelled()]
        return statuses, len(pending)

    return asyncio.run(run())


def test_still_needed_bentoml_requests_stock_timeout_middleware_leaves_a_timer_per_request(monkeypatch):
    monkeypatch.setattr(TimeoutMiddleware, "__call__", bentoml_requests.STOCK_TIMEOUT_CALL)
    statuses, pending = timers_left(20, [])
    assert statuses == [200] * 20
    assert pending == 20, can_go("bentoml_requests.cancel_timeout_timers")


def test_a_request_answered_leaves_no_timer_and_is_released():
    """Without the fix, each request's timer (and through it the request) stays in the loop for the timeout."""
    compat.apply()
    compat.apply()  # twice changes nothing
    held = []
    statuses, pending = timers_left(50, held)
    gc.collect()
    assert statuses == [200] * 50
    assert pending == 0
    assert [ref() for ref in held] == [None] * 50


def test_a_request_over_the_timeout_still_gets_504():
    compat.apply()

    async def slow(scope: dict, receive: typing.Any, send: typing.Any) -> None:
        await asyncio.sleep(5)

    assert asyncio.run(answered(TimeoutMiddleware(slow, timeout=0.05), 1)) == [504]


def test_an_answer_started_outlives_the_timeout():
    compat.apply()
    sent = []

    async def answers_slowly(scope: dict, receive: typing.Any, send: typing.Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(0.2)  # four timeouts, once answering
        await send({"type": "http.response.body", "body": b"ok"})

    async def send(message: dict) -> None:
        sent.append(message.get("status", message.get("body")))

    asyncio.run(TimeoutMiddleware(answers_slowly, timeout=0.05)({"type": "http", "path": "/", "state": {}}, None, send))
    assert sent == [200, b"ok"]


def test_still_needed_bentoml_requests_stock_timeout_middleware_holds_a_failed_request_for_the_timeout(monkeypatch):
    monkeypatch.setattr(TimeoutMiddleware, "__call__", bentoml_requests.STOCK_TIMEOUT_CALL)
    began = time.monotonic()
    statuses = asyncio.run(answered(TimeoutMiddleware(fails_at_once, timeout=0.5), 1))
    assert statuses == [] and time.monotonic() - began >= 0.5, can_go("bentoml_requests.cancel_timeout_timers (the app's end)")


def test_a_request_whose_app_fails_before_answering_ends_with_its_error_at_once():
    compat.apply()
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="a dependency"):
        asyncio.run(answered(TimeoutMiddleware(fails_at_once, timeout=30), 1))
    assert time.monotonic() - began < 5


async def fails_at_once(scope: dict, receive: typing.Any, send: typing.Any) -> None:
    raise TimeoutError("a dependency did not answer in time")  # as BentoML's /readyz on an Encoder still loading


class Probed:
    """What BentoML's client's ``is_ready`` reads of itself: a session to a dependency's server, and its readiness path."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._readyz_endpoint = "/readyz"
        self._session_manager = types.SimpleNamespace(get_session=lambda: asyncio.sleep(0, session))


def probed(is_ready: typing.Callable, server: str) -> bool | str:
    """``is_ready`` against a server that is ``silent`` (accepts, never answers), ``closed`` (refuses) or ``ready`` (200)."""

    async def run() -> bool | str:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            if server == "ready":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            await asyncio.sleep(5)

        listening = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = listening.sockets[0].getsockname()[1]
        if server == "closed":
            listening.close()
            await listening.wait_closed()
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{port}") as session:
            try:
                return await is_ready(Probed(session), timeout=0.3)
            except Exception as error:
                return type(error).__name__
            finally:
                listening.close()

    return asyncio.run(run())


def test_still_needed_bentoml_requests_stock_readiness_probe_raises_on_a_silent_dependency():
    assert probed(bentoml_requests.STOCK_IS_READY, "silent") == "TimeoutError", can_go("bentoml_requests.probe_dependencies_safely")


@pytest.mark.parametrize(("server", "ready"), [("silent", False), ("closed", False), ("ready", True)])
def test_a_dependency_that_cannot_be_reached_is_not_ready(server, ready):
    compat.apply()
    assert probed(AsyncClient.is_ready, server) is ready


# bentoml_requests: spans only when exported.


@bentoml.service
class Plain:
    @bentoml.api
    def echo(self, text: str) -> str:
        return text


def test_still_needed_bentoml_requests_stock_services_trace_with_nothing_exported():
    Plain.inject_config()
    assert bentoml_requests.exported() is False
    stock = [middleware.cls for middleware in bentoml_requests.STOCK_MIDDLEWARES.fget(ServiceAppFactory(Plain))]
    assert OpenTelemetryMiddleware in stock, can_go("bentoml_requests.trace_only_when_exported")


def test_opentelemetry_wraps_requests_only_when_a_span_would_be_exported(monkeypatch):
    """Nothing is exported by default: its spans would be for nobody, so the middleware is left out;
    with an exporter, BentoML's stack as it is."""
    compat.apply()
    Plain.inject_config()
    assert bentoml_requests.exported() is False  # no TEXTBENTO_OTLP_ENDPOINT, no tracing config here
    plain = [middleware.cls for middleware in ServiceAppFactory(Plain).middlewares]
    monkeypatch.setattr(bentoml_requests, "exported", lambda: True)
    traced = [middleware.cls for middleware in ServiceAppFactory(Plain).middlewares]
    assert OpenTelemetryMiddleware in traced and OpenTelemetryMiddleware not in plain
    assert [cls for cls in traced if cls is not OpenTelemetryMiddleware] == plain
    assert TimeoutMiddleware in plain


# No route takes ``self`` from BentoML's class views (whose dependency FastAPI ran on a thread): none is patched for it.


def test_routes_take_their_pipeline_on_the_event_loop(monkeypatch):
    """FastAPI runs a plain function's dependency on a worker thread: the routes' own (``ThePipeline``)
    is a coroutine, so a request takes no hop to the thread pool for it."""
    from fastapi.dependencies import utils
    from fastapi.routing import APIRouter

    from api.pipeline import ThePipeline

    app, router = FastAPI(), APIRouter()

    @router.get("/who")
    async def who(pipeline: typing.Any = ThePipeline) -> dict:
        return {"pipeline": pipeline}

    app.include_router(router)
    app.state.pipeline = "the pipeline"
    on_threads = []
    stock = utils.run_in_threadpool
    monkeypatch.setattr(utils, "run_in_threadpool", lambda call, **values: on_threads.append(call) or stock(call, **values))
    assert TestClient(app).get("/who").json() == {"pipeline": "the pipeline"}
    assert on_threads == []
    assert inspect.iscoroutinefunction(ThePipeline.dependency)
    assert not inspect.iscoroutinefunction(bentoml.get_current_service)  # BentoML's own, unpatched


# bentoml_metrics: BentoML's HTTP metrics labelled by route.


def counted_requests(namespace: str, paths: typing.Callable[[TestClient, int], None]) -> dict:
    """Requests through BentoML's metrics middleware in front of a service-like app; its request counter by (endpoint, status)."""
    import prometheus_client
    from _bentoml_impl.server.mount import PassiveMount
    from fastapi import APIRouter
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

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
    app = Starlette(routes=routes, middleware=[Middleware(instruments.RunnerTrafficMetricsMiddleware, namespace=namespace)])
    client = TestClient(app)
    for i in range(30):
        paths(client, i)
    return {
        (sample.labels["endpoint"], sample.labels["http_response_code"]): sample.value
        for family in prometheus_client.REGISTRY.collect()
        if family.name == f"{namespace}_request"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def test_still_needed_bentoml_metrics_stock_middleware_labels_each_unknown_path(monkeypatch):
    monkeypatch.setattr(instruments.RunnerTrafficMetricsMiddleware, "__call__", bentoml_metrics.STOCK_METRICS_CALL)
    counted = counted_requests("textbento_test_stock_labels", lambda client, i: client.get(f"/zz-{i}"))
    assert len(counted) == 30, can_go("bentoml_metrics (labels by route)")


def test_bentoml_http_metrics_label_a_path_by_its_route_and_unknown_paths_other():
    """Without the fix, each unknown path is a series of its own in BentoML's request counters (and
    of its histogram, and its in-progress gauge): any client could grow every scrape without bound."""
    compat.apply()

    def paths(client: TestClient, i: int) -> None:
        assert client.get(f"/zz-{i}").status_code == 404
        assert client.get(f"/v1/models/m{i}").json() == {"model": f"m{i}"}
        assert client.post("/v1/embeddings").status_code == 200
        assert client.get("/v1/embeddings").status_code == 405

    assert counted_requests("textbento_test_labels", paths) == {
        ("other", "404"): 30,
        ("/v1/models/{model}", "200"): 30,
        ("/v1/embeddings", "200"): 30,
        ("/v1/embeddings", "405"): 30,
    }


def test_the_metric_labels_fix_refuses_a_changed_bentoml(monkeypatch):
    async def changed(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)

    monkeypatch.setattr(instruments.RunnerTrafficMetricsMiddleware, "__call__", changed)
    with pytest.raises(RuntimeError, match="RunnerTrafficMetricsMiddleware changed"):
        bentoml_metrics.apply()


# bentoml_internals.NEVER_RECYCLE: BentoML's client session recycling turned off.


async def first_session_closed(**recycling) -> bool:
    """Whether the client session handed to a first call is closed under it by the calls after it (``max_requests`` + 1 of them)."""
    from _bentoml_impl.client.proxy2 import SessionManager

    manager = SessionManager("http://127.0.0.1:9", timeout=1, headers={}, **recycling)
    first = await manager.get_session()
    for _ in range(int(min(manager.max_requests, 1000)) + 1):
        await manager.get_session()
    closed = first.closed
    await manager.close()
    return closed


def test_still_needed_never_recycle_stock_client_closes_a_session_in_use():
    assert asyncio.run(first_session_closed()) is True, can_go("bentoml_internals.NEVER_RECYCLE")


def test_never_recycle_keeps_the_session_and_is_what_the_client_reads():
    from _bentoml_impl.client.proxy2 import RemoteProxy

    assert asyncio.run(first_session_closed(**compat.NEVER_RECYCLE)) is False
    source = inspect.getsource(RemoteProxy.__init__)
    assert '"runner_connection"' in source and all(f'"{key}"' in source for key in compat.NEVER_RECYCLE)


# uvicorn_connections: headers and body deadlines, a keep-alive per service.


async def connection_timers(protocol_class: type) -> dict[str, int]:
    """A uvicorn server on ``protocol_class``; per connection state, the timers pending that would close that connection."""

    async def app(scope, receive, send):
        if scope["type"] == "http":  # answers without reading the body, as a 401 or 404 does
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"no"})

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, http=protocol_class, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port, loop = server.servers[0].sockets[0].getsockname()[1], asyncio.get_running_loop()

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, typing.Any]:
        before = set(server.server_state.connections)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while not (opened := set(server.server_state.connections) - before):
            await asyncio.sleep(0.01)
        return reader, writer, opened.pop()

    def closing(connection) -> int:
        handles = [handle for handle in loop._scheduled if not handle.cancelled()]
        return sum(getattr(handle._callback, "__self__", None) is connection or connection in handle._args for handle in handles)

    timers = {}
    reader, writer, connection = await connect()
    await asyncio.sleep(0.05)
    timers["silent"] = closing(connection)
    writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n")
    await asyncio.sleep(0.05)
    timers["half headers"] = closing(connection)
    writer.close()
    reader, writer, connection = await connect()
    writer.write(b"POST /v1/embeddings HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n{")
    assert (await asyncio.wait_for(reader.readuntil(b"no"), 5)).startswith(b"HTTP/1.1 401")
    writer.write(b" ")  # the body, trickling in after its answer
    await asyncio.sleep(0.05)
    timers["body after its answer"] = closing(connection)
    writer.close()
    server.should_exit = True
    await serving
    return timers


def test_still_needed_uvicorn_connections_stock_protocol_holds_slow_connections_forever():
    stock = type("StockHttpToolsProtocol", (uvicorn_connections.Protocol,), uvicorn_connections.STOCK)
    timers = asyncio.run(asyncio.wait_for(connection_timers(stock), 30))
    assert timers == {"silent": 0, "half headers": 0, "body after its answer": 0}, can_go(
        "uvicorn_connections (headers and body deadlines)"
    )


def test_still_needed_uvicorn_connections_stock_protocol_resets_a_refused_upload_without_keep_alive():
    """uvicorn closes a ``Connection: close`` connection as its answer ends, its body still arriving: the
    kernel's reset destroys the answer (tests/test_connections.py has the lingering close that keeps it)."""
    from tests.test_connections import refused_upload_answer

    stock = type("StockHttpToolsProtocol", (uvicorn_connections.Protocol,), uvicorn_connections.STOCK)
    answer = asyncio.run(asyncio.wait_for(refused_upload_answer(stock), 30))
    assert b"ConnectionResetError" in answer, can_go("uvicorn_connections (lingering close)") + f": {answer[:200]!r}"


def test_the_patched_protocol_has_a_deadline_on_every_slow_connection():
    compat.apply()
    limit_connections(header_timeout_s=5, body_timeout_s=5, keep_alive_s=5)
    timers = asyncio.run(asyncio.wait_for(connection_timers(uvicorn_connections.Protocol), 30))
    assert timers == {"silent": 1, "half headers": 1, "body after its answer": 1}


def client_keep_alive() -> float:
    """How long BentoML's client keeps an idle connection to a service to reuse."""
    from _bentoml_impl.client.proxy2 import SessionManager

    async def keep_alive() -> float:
        session = SessionManager("file:///tmp/textbento-missing.sock", timeout=1, headers={})._make_client()
        try:
            return session.connector._keepalive_timeout
        finally:
            await session.close()

    return asyncio.run(keep_alive())


def test_still_needed_uvicorn_connections_a_dependency_serves_with_uvicorns_shorter_keep_alive():
    """BentoML passes ``--timeout-keep-alive`` to the public server only: the Encoder's uvicorn keeps its
    default, which ends before the client's, so the server could close a connection as the client reuses it."""
    from _bentoml_impl.server.serving import create_dependency_watcher

    source = inspect.getsource(create_dependency_watcher)
    default = uvicorn.Config(app=None).timeout_keep_alive
    assert "keep_alive" not in source and "keep-alive" not in source and default < client_keep_alive(), can_go(
        "uvicorn_connections (a keep-alive per service)"
    )


def test_the_encoder_outlasts_its_clients_keep_alive():
    """The failed hop's cause, pinned against the installed BentoML: its client session keeps an
    idle connection for the connector's keep-alive, which must end before the Encoder's server
    closes it (else the server may close a connection just as the client reuses it)."""
    assert 0 < client_keep_alive() < ENCODER_KEEP_ALIVE_S


def test_limit_connections_refuses_an_unpatched_uvicorn(monkeypatch):
    monkeypatch.setattr(uvicorn_connections, "applied", lambda: False)
    monkeypatch.setattr("serving.connections.applied", lambda: False)
    with pytest.raises(RuntimeError, match=re.escape("serving.compat.apply()")):
        limit_connections(header_timeout_s=5, body_timeout_s=5, keep_alive_s=5)


# bentoml_arbiter: the services' sockets kept until the watchers have stopped.


def stopping_order(monkeypatch, stop) -> list[str]:
    """What BentoML's arbiter does, in order, as SIGTERM stops it with ``stop`` and circus then closes its sockets;
    circus's own steps recorded, not run."""
    from contextlib import ExitStack

    from bentoml._internal.utils.circus import Arbiter
    from circus.arbiter import Arbiter as CircusArbiter

    done: list[str] = []
    monkeypatch.setattr(CircusArbiter, "stop", lambda self: done.append("watchers stopped"))
    monkeypatch.setattr(CircusArbiter, "stop_controller_and_close_sockets", lambda self: done.append("sockets closed"))
    monkeypatch.setattr(Arbiter, "stop", stop)
    arbiter = Arbiter.__new__(Arbiter)
    arbiter.exit_stack = ExitStack()
    arbiter.exit_stack.callback(done.append, "socket files removed")
    arbiter.stop()
    arbiter.stop_controller_and_close_sockets()
    return done


def test_still_needed_bentoml_arbiter_stock_stop_removes_the_socket_files_before_the_watchers_stop(monkeypatch):
    order = stopping_order(monkeypatch, bentoml_arbiter.STOCK_STOP)
    assert order[:2] == ["socket files removed", "watchers stopped"], can_go("bentoml_arbiter")


def test_the_socket_files_are_removed_after_the_watchers_have_stopped(monkeypatch):
    compat.apply()
    from bentoml._internal.utils.circus import Arbiter

    assert stopping_order(monkeypatch, Arbiter.stop) == ["watchers stopped", "sockets closed", "socket files removed"]


# bentoml_arbiter: a dead process replaced as soon as it exits.

SUPERVISED = """
import sys
from serving import compat
if sys.argv[1] == "patched":
    compat.apply()
from bentoml._internal.utils.circus import create_standalone_arbiter
from circus.watcher import Watcher
sleeper = Watcher(name="sleeper", cmd=sys.executable, args=["-c", "import time; time.sleep(600)"], numprocesses=1)
create_standalone_arbiter([sleeper]).start()
"""


def sleepers(arbiter: subprocess.Popen) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(arbiter.pid).children():
        with contextlib.suppress(psutil.Error):
            if "time.sleep(600)" in " ".join(child.cmdline()):
                found.append(child)
    return found


def test_still_needed_bentoml_arbiter_checks_its_processes_every_10_s_and_ignores_sigchld():
    from bentoml._internal.utils.circus import create_standalone_arbiter
    from circus.sighandler import SysHandler

    assert create_standalone_arbiter([]).check_delay == 10, can_go("bentoml_arbiter (dead processes replaced at once)")
    assert signal.SIGCHLD not in SysHandler.SIGNALS, can_go("bentoml_arbiter (dead processes replaced at once)")


def test_a_killed_process_is_replaced_at_once_not_at_the_next_periodic_check():
    """A real arbiter, as ``bentoml serve`` makes it, over one process; killed a second after it started,
    that process would be replaced at the first periodic check, 10 s after the start."""
    arbiter = subprocess.Popen([sys.executable, "-c", SUPERVISED, "patched"], cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (started := sleepers(arbiter)) and time.monotonic() < deadline:
            time.sleep(0.05)
        (first,) = started
        time.sleep(1)
        first.kill()
        killed = time.monotonic()
        while not (replaced := [p for p in sleepers(arbiter) if p.pid != first.pid]) and time.monotonic() - killed < 5:
            time.sleep(0.05)
        assert replaced, "not replaced within 5 s of its death"
    finally:
        os.killpg(arbiter.pid, signal.SIGKILL)
        arbiter.wait()


def test_a_crash_loop_is_left_to_the_periodic_check(monkeypatch):
    """After ``AT_ONCE`` replacements at once within the window, a death waits for the periodic check."""
    checks: list[str] = []

    class Loop:
        def add_future(self, future, callback):
            checks.append(future)

        def call_later(self, delay, callback, *args):
            checks.append("later")

    arbiter = types.SimpleNamespace(_stopping=False, _restarting=False, _exclusive_running_command=None, loop=Loop())
    arbiter.replaced_at_once = collections.deque(maxlen=bentoml_arbiter.AT_ONCE)
    arbiter.manage_watchers = lambda: "checked"
    for _ in range(bentoml_arbiter.AT_ONCE + 2):
        bentoml_arbiter._replace_the_dead(arbiter)
    assert checks == ["checked"] * bentoml_arbiter.AT_ONCE
    arbiter._exclusive_running_command = "arbiter_start_watchers"
    arbiter.replaced_at_once.clear()
    bentoml_arbiter._replace_the_dead(arbiter)
    assert checks[-1] == "later"
    arbiter._exclusive_running_command, arbiter._stopping = None, True
    bentoml_arbiter._replace_the_dead(arbiter)
    assert len(checks) == bentoml_arbiter.AT_ONCE + 1


def test_gpus_are_read_from_bentomls_own_inventory():
    from serving import gpus

    assert gpus.system_resources is bentoml_internals.system_resources
    assert "nvidia.com/gpu" in gpus.system_resources()


# openvino_telemetry: OpenVINO's usage telemetry declined.

needs_openvino = pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="OpenVINO is not installed")


@needs_openvino
def test_openvino_telemetry_assumes_consent_where_nothing_declines(monkeypatch, tmp_path):
    """Its consent check, unpatched, in a home without a consent file and outside CI: no file, which
    ``Telemetry.init`` reads as consent when its opt-in dialog is off, as OpenVINO's import calls it."""
    from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker

    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("CI", "TF_BUILD", "JENKINS_URL"):
        monkeypatch.delenv(name, raising=False)
    check = openvino_telemetry.stock.get("check", OptInChecker.check)  # the stock one, applied or not
    assert check(OptInChecker(), False, True) == ConsentCheckResult.NO_FILE, can_go("openvino_telemetry")


IMPORTED_BY = {
    "the server": "from serving import compat; compat.apply(); import openvino",
    "the tests": "import tests.conftest, openvino",
}


@needs_openvino
@pytest.mark.parametrize("first", IMPORTED_BY.values(), ids=IMPORTED_BY.keys())
def test_openvino_imported_after_apply_writes_and_sends_nothing(tmp_path, first: str):
    """OpenVINO imported in a fresh process by the server (after ``compat.apply()``) or by the tests (after their
    conftest): no consent, nothing under the home."""
    script = f"{first}; from openvino_telemetry import Telemetry; print(Telemetry().consent)"
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TF_BUILD", "JENKINS_URL")}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**env, "HOME": str(tmp_path)}, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.split()[-1] == "False", done.stderr[-2000:]
    assert list(tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))
