"""Four per-request costs of BentoML 1.4.40 and one unbounded metric label, corrected in place (docs/design.md 18).

- **A JSON schema per answer.** BentoML works out an IO model's media type from its JSON schema,
  built anew (a pydantic ``TypeAdapter`` and its schema) for every answer of every call, on the
  path of every request (its cost: docs/design.md 8). The media type depends only on the class, so
  each class's is worked out once.
- **A timer per request, never cancelled.** BentoML's ``TimeoutMiddleware`` starts a
  ``loop.call_later(timeout)`` for every request and leaves it in the event loop once the request
  is answered. Until it fires (``traffic.timeout``: a minute and more), the timer holds the
  request's context: its tracing span, its scope, its task's context variables. Memory then grows
  with the request rate times the timeout (docs/reliability.md, the disconnect storm), and the
  loop's timer heap with it. Here the timer is cancelled when the request ends.
- **Spans for nobody.** Every service wraps every request in OpenTelemetry's ASGI middleware,
  which makes a server span and a span per message received and sent, whether or not a span
  processor would export them (its cost: docs/design.md 8). Without one (no
  ``TEXTBENTO_OTLP_ENDPOINT``, no ``tracing`` in a BentoML config) the middleware is left out; with
  one, it stays as it is.
- **A thread per request for ``self``.** A FastAPI route on a service class gets its ``self`` from
  ``Depends(get_current_service)``, a plain function, and FastAPI runs a plain function's
  dependency on a worker thread: a hop to the thread pool and back for every request (0.22 ms of
  a lone request's wall clock, served: docs/design.md 18). Here it comes
  from ``current_service``, a coroutine FastAPI awaits on the event loop; the TEI and Cohere
  routes take the service from it too.
- **A metric label per path.** BentoML's HTTP metrics (``bentoml_service_request_*``, the
  Encoder's too) label each request with its raw path, so any client, with or without a key, adds
  series to every scrape with ``GET /anything-<uuid>``. Here the label is the template of the route
  that answers the path (``/v1/embeddings``, ``/static_content/{path}``), or ``other`` where none does.

Each refuses to start when the installed BentoML no longer has what it replaces
(tests/test_bentoml_fixes.py pins each).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from functools import cache
from typing import Any

from _bentoml_impl.server.app import ServiceAppFactory
from _bentoml_sdk import _internals, io_models
from _bentoml_sdk.service import get_current_service
from bentoml._internal.configuration.containers import BentoMLContainer
from bentoml._internal.server.http import instruments, traffic
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Match, Mount


def apply() -> None:
    """Every correction, from now on, in this process (twice changes nothing)."""
    cache_media_types()
    cancel_timeout_timers()
    trace_only_when_exported()
    self_on_the_loop()
    label_metrics_by_route()


def cache_media_types() -> None:
    """Every IO model's ``mime_type()`` computed once per class from now on."""
    mime_type = getattr(io_models.IOMixin, "mime_type", None)
    if mime_type is None or not hasattr(mime_type, "__func__"):
        raise RuntimeError("BentoML's IO models changed: serving/bentoml_fixes.py no longer applies; re-measure the media type's cost")
    if not hasattr(mime_type.__func__, "cache_info"):
        io_models.IOMixin.mime_type = classmethod(cache(mime_type.__func__))


# The line of BentoML's TimeoutMiddleware.__call__ that starts the timer it never cancels.
UNCANCELLED_TIMER = "loop.call_later(self.timeout, self._set_timer_out, waiter)"


def cancel_timeout_timers() -> None:
    """BentoML's ``TimeoutMiddleware`` cancels its timer when the request ends, from now on."""
    middleware = traffic.TimeoutMiddleware
    if middleware.__call__ is _timed:
        return
    source = inspect.getsource(middleware.__call__)
    if UNCANCELLED_TIMER not in source or ".cancel()" in source.replace("fut.cancel()", ""):
        raise RuntimeError("BentoML's TimeoutMiddleware changed: serving/bentoml_fixes.py no longer applies")
    middleware.__call__ = _timed


async def _timed(self: Any, scope: dict, receive: Any, send: Any) -> None:
    """BentoML's ``TimeoutMiddleware.__call__`` as it is, plus the timer's cancel."""
    if scope["type"] not in ("http", "websocket"):
        return await self.app(scope, receive, send)
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()
    timer = loop.call_later(self.timeout, self._set_timer_out, waiter)

    async def _send(message: dict) -> None:
        if not waiter.done():
            waiter.set_result(None)
        await send(message)

    fut = asyncio.ensure_future(self.app(scope, receive, _send), loop=loop)
    try:
        await waiter
    except TimeoutError:
        if fut.cancel():
            message = {"error": f"Not able to process the request in {self.timeout} seconds"}
            await JSONResponse(message, status_code=504)(scope, receive, send)
    else:
        await fut
    finally:
        timer.cancel()


def exported() -> bool:
    """Whether BentoML's tracer provider has a span processor: something that would export a span."""
    return bool(BentoMLContainer.tracer_provider.get()._active_span_processor._span_processors)


def trace_only_when_exported() -> None:
    """The services' ASGI apps leave OpenTelemetry's middleware out when no span would be exported."""
    middlewares = ServiceAppFactory.__dict__.get("middlewares")
    if not isinstance(middlewares, property):
        raise RuntimeError("BentoML's ServiceAppFactory changed: serving/bentoml_fixes.py no longer applies")
    if getattr(middlewares.fget, "only_when_exported", False):
        return
    stock = middlewares.fget

    def chosen(factory: ServiceAppFactory) -> list:
        every = stock(factory)
        return every if exported() else [middleware for middleware in every if middleware.cls is not OpenTelemetryMiddleware]

    chosen.only_when_exported = True
    ServiceAppFactory.middlewares = property(chosen)


async def current_service() -> Any:
    """The service instance answering, as ``bentoml.get_current_service`` gives it, but as a coroutine:
    FastAPI awaits it on the event loop, where it runs a plain function on a worker thread."""
    return get_current_service()


def self_on_the_loop() -> None:
    """FastAPI class views made from now on (``bentoml.asgi_app``) take their ``self`` from ``current_service``."""
    stock = _internals.make_fastapi_class_views
    if getattr(stock, "self_on_the_loop", False):
        return
    source = inspect.getsource(stock)
    if "from .service import get_current_service" not in source or "Depends(get_current_service)" not in source:
        raise RuntimeError("BentoML's FastAPI class views changed: serving/bentoml_fixes.py no longer applies")
    # The stock function imports its dependency from this module as it runs: the coroutine is put
    # there for that call only (at import, on one thread), and every other caller keeps the original.
    service_module = importlib.import_module("_bentoml_sdk.service")

    def class_views(cls: type, app: Any) -> None:
        service_module.get_current_service = current_service
        try:
            stock(cls, app)
        finally:
            service_module.get_current_service = get_current_service

    class_views.self_on_the_loop = True
    _internals.make_fastapi_class_views = class_views


# The label of a path no route answers, as textbento's own request counter names it (api/middleware.CountAnswers).
UNROUTED = "other"
# The request's own scope, inside the copy BentoML's metrics middleware labels from (``label_metrics_by_route``).
REQUEST_SCOPE = "textbento.request_scope"
# What BentoML's metrics middleware labels a request with, and how it passes the request on.
PATH_LABEL, PASSED_ON = 'endpoint = scope["path"]', "await self.app(scope, wrapped_receive, wrapped_send)"
_stock_metrics_call = instruments.RunnerTrafficMetricsMiddleware.__call__


def route_template(routes: list[BaseRoute], scope: dict) -> str | None:
    """The path template of the route that answers ``scope`` by Starlette's rule (the first full match,
    else the first partial one: a known path with another method), into mounted apps and FastAPI's
    included routers; None if none does, or if the route that does shows no template."""
    partial = None
    for route in routes:
        match, child_scope = route.matches(scope)
        if match is Match.NONE:
            continue
        if isinstance(route, Mount):
            inner = route_template(route.routes, {**scope, **child_scope}) if route.routes else "/{path}"
            template = None if inner is None else route.path + inner
        elif (router := getattr(route, "original_router", None)) is not None:
            # FastAPI keeps an included router whole, as one route: its own routes are read. (One included
            # with a prefix would not match here: its paths are labelled ``other``, still a bounded label.)
            template = route_template(router.routes, scope)
        else:
            template = getattr(route, "path", None)
        if template is not None and match is Match.FULL:
            return template
        partial = partial or template
    return partial


def metric_label(middleware: Any, scope: dict) -> str:
    """The route template of the request's path, or ``UNROUTED``. A declared path without parameters is
    its own label: those are kept per middleware (as many as the app declares), the rest worked out each time."""
    path = scope["path"]
    known = middleware.__dict__.setdefault("route_labels", {})
    if path in known:
        return path
    label = route_template(scope["app"].routes, scope) if "app" in scope else None
    if label == path:
        known[path] = path
    return label or UNROUTED


class RequestScope:
    """The app behind BentoML's metrics middleware, handed the request's own scope back."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await self.app(scope.get(REQUEST_SCOPE, scope), receive, send)


async def _labelled_by_route(self: Any, scope: dict, receive: Any, send: Any) -> None:
    """BentoML's ``RunnerTrafficMetricsMiddleware.__call__``, given a copy of the scope whose path is the label:
    it reads the path once, as its label, and passes the copy on, where ``RequestScope`` swaps the request's own back in."""
    if scope["type"] != "http" or (label := metric_label(self, scope)) == scope["path"]:
        return await _stock_metrics_call(self, scope, receive, send)
    if not isinstance(self.app, RequestScope):
        self.app = RequestScope(self.app)
    await _stock_metrics_call(self, {**scope, "path": label, REQUEST_SCOPE: scope}, receive, send)


def label_metrics_by_route() -> None:
    """BentoML's HTTP metrics label each request with its route's template, or ``other``, from now on."""
    middleware = instruments.RunnerTrafficMetricsMiddleware
    if middleware.__call__ is _labelled_by_route:
        return
    source = inspect.getsource(middleware.__call__)
    if middleware.__call__ is not _stock_metrics_call or source.count(PATH_LABEL) != 1 or PASSED_ON not in source:
        raise RuntimeError("BentoML's RunnerTrafficMetricsMiddleware changed: serving/bentoml_fixes.py no longer applies")
    middleware.__call__ = _labelled_by_route
