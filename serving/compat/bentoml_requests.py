"""BentoML's HTTP path, corrected in place (docs/design.md: what the service corrects for).

- **A JSON schema per answer.** BentoML works out an IO model's media type from its JSON schema,
  built anew (a pydantic ``TypeAdapter`` and its schema) for every answer of every call, on the
  path of every request. The media type depends only on the class, so each class's is worked out once.
- **A timer per request, never cancelled.** BentoML's ``TimeoutMiddleware`` starts a
  ``loop.call_later(timeout)`` for every request and leaves it in the event loop once the request
  is answered. Until it fires (``traffic.timeout``: a minute and more), the timer holds the
  request's context: its tracing span, its scope, its task's context variables. Memory then grows
  with the request rate times the timeout (docs/reliability.md, the disconnect storm), and the
  loop's timer heap with it. Here the timer is cancelled when the request ends.
- **A request that fails before answering, held for the timeout.** The same middleware waits for the
  app's first message and for nothing else: an app that raises before it sends one leaves the
  request open, unanswered, until the timeout, and then sends nothing. Its task meanwhile keeps
  the worker from exiting on SIGTERM (uvicorn waits for every request's task). Here the wait also
  ends when the app does, and its error goes on to the error middleware (a 500) at once.
- **A readiness probe that raises.** ``/readyz`` asks each dependency's ``/readyz`` within 5 s, and
  BentoML's client reads only aiohttp's socket timeouts as "not ready": the total timeout (an
  Encoder still loading, its call waiting in the socket's backlog) raises ``TimeoutError`` out
  of the probe. Here any failure to reach a dependency reads as "not ready": ``/readyz`` is a 503.
- **Spans for nobody.** Every service wraps every request in OpenTelemetry's ASGI middleware,
  which makes a server span and a span per message received and sent, whether or not a span
  processor would export them. Without one (no ``TEXTBENTO_OTLP_ENDPOINT``, no ``tracing`` in a
  BentoML config) the middleware is left out; with one, it stays as it is.

Each refuses to start when the installed BentoML no longer has what it replaces.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from functools import cache
from typing import Any

import aiohttp
from _bentoml_impl.client.proxy2 import AsyncClient
from _bentoml_impl.server.app import ServiceAppFactory
from _bentoml_sdk import io_models
from bentoml._internal.server.http import traffic
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from starlette.responses import JSONResponse

from .bentoml_internals import tracer_provider

# BentoML's own code, as it was before any patch (tests/test_compat.py checks each still does what is corrected here).
STOCK_MIME_TYPE = io_models.IOMixin.__dict__["mime_type"].__func__
STOCK_TIMEOUT_CALL = traffic.TimeoutMiddleware.__call__
STOCK_MIDDLEWARES = ServiceAppFactory.__dict__.get("middlewares")
STOCK_IS_READY = AsyncClient.is_ready
# The line of BentoML's TimeoutMiddleware.__call__ that starts the timer it never cancels.
UNCANCELLED_TIMER = "loop.call_later(self.timeout, self._set_timer_out, waiter)"
# What BentoML's client reads as "not ready"; anything else raised out of its is_ready.
STOCK_NOT_READY = "except aiohttp.ServerTimeoutError:"
logger = logging.getLogger("textbento")


def apply() -> None:
    """Every correction, from now on, in this process (twice changes nothing)."""
    cache_media_types()
    cancel_timeout_timers()
    probe_dependencies_safely()
    trace_only_when_exported()


def cache_media_types() -> None:
    """Every IO model's ``mime_type()`` computed once per class from now on."""
    mime_type = getattr(io_models.IOMixin, "mime_type", None)
    if mime_type is None or not hasattr(mime_type, "__func__"):
        raise RuntimeError("BentoML's IO models changed: serving/compat/bentoml_requests.py no longer applies; re-measure its cost")
    if not hasattr(mime_type.__func__, "cache_info"):
        io_models.IOMixin.mime_type = classmethod(cache(mime_type.__func__))


def cancel_timeout_timers() -> None:
    """BentoML's ``TimeoutMiddleware`` cancels its timer when the request ends, and stops waiting when its app does, from now on."""
    middleware = traffic.TimeoutMiddleware
    if middleware.__call__ is _timed:
        return
    source = inspect.getsource(middleware.__call__)
    if UNCANCELLED_TIMER not in source or ".cancel()" in source.replace("fut.cancel()", ""):
        raise RuntimeError("BentoML's TimeoutMiddleware changed: serving/compat/bentoml_requests.py no longer applies")
    middleware.__call__ = _timed


async def _timed(self: Any, scope: dict, receive: Any, send: Any) -> None:
    """BentoML's ``TimeoutMiddleware.__call__`` as it is, plus the timer's cancel and the app's end ending the wait."""
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
    fut.add_done_callback(lambda _: waiter.done() or waiter.set_result(None))  # it ended without a word: its error, below
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


def probe_dependencies_safely() -> None:
    """BentoML's client reads any failure of a dependency's readiness probe as "not ready", from now on."""
    if AsyncClient.is_ready is _is_ready:
        return
    if STOCK_NOT_READY not in inspect.getsource(AsyncClient.is_ready):
        raise RuntimeError("BentoML's client changed its readiness probe: serving/compat/bentoml_requests.py no longer applies")
    AsyncClient.is_ready = _is_ready


async def _is_ready(self: AsyncClient, timeout: int | None = None) -> bool:
    """BentoML's ``AsyncClient.is_ready``, false on every failure to reach the dependency, its answer released."""
    client = await self._session_manager.get_session()
    try:
        async with client.get(self._readyz_endpoint, timeout=aiohttp.ClientTimeout(timeout) if timeout else None) as response:
            return response.status == 200
    except (TimeoutError, aiohttp.ClientError) as error:
        logger.warning("a dependency is not ready: %r", error)
        return False


def exported() -> bool:
    """Whether BentoML's tracer provider has a span processor: something that would export a span."""
    return bool(tracer_provider()._active_span_processor._span_processors)


def trace_only_when_exported() -> None:
    """The services' ASGI apps leave OpenTelemetry's middleware out when no span would be exported."""
    middlewares = ServiceAppFactory.__dict__.get("middlewares")
    if not isinstance(middlewares, property):
        raise RuntimeError("BentoML's ServiceAppFactory changed: serving/compat/bentoml_requests.py no longer applies")
    if getattr(middlewares.fget, "only_when_exported", False):
        return
    stock = middlewares.fget

    def chosen(factory: ServiceAppFactory) -> list:
        every = stock(factory)
        return every if exported() else [middleware for middleware in every if middleware.cls is not OpenTelemetryMiddleware]

    chosen.only_when_exported = True
    ServiceAppFactory.middlewares = property(chosen)
