"""ASGI guards in front of the routes, each answering with the one error shape before any work starts."""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from functools import cached_property
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from models.memory import LARGE, release_freed_memory
from serving.gone import DEADLINE_HEADERS, deadline, deadline_of
from serving.settings import settings
from serving.telemetry import telemetry

from .errors import APIError, error_response
from .flow import over_body_budget

logger = logging.getLogger("textbento")
CLIENT_GONE = 499  # nginx's status for "client closed request": what textbento_requests_total counts such a request as


async def reject(error: APIError, scope: Scope, receive: Receive, send: Send) -> None:
    await error_response(error, scope["path"])(scope, receive, send)


def header(scope: Scope, name: bytes) -> str:
    return next((value.decode("latin-1") for key, value in scope["headers"] if key == name), "")


class BearerAuth:
    """``Authorization: Bearer <key>`` on every path but ``open_paths`` (the probes): the docs, the schema
    and paths no route answers included, so that a route added later is never open by omission; 401 otherwise.

    Keys are compared with ``hmac.compare_digest`` against every configured key, so the time
    taken says nothing about how much of a key matched.
    """

    def __init__(self, app: ASGIApp, keys: Iterable[str], open_paths: Iterable[str]) -> None:
        self.app, self.open_paths = app, frozenset(open_paths)
        self.keys = [key.encode() for key in keys]

    def protects(self, path: str) -> bool:
        return path not in self.open_paths

    def authorized(self, scope: Scope) -> bool:
        scheme, _, token = header(scope, b"authorization").partition(" ")
        presented = token.strip().encode()
        matches = [hmac.compare_digest(presented, key) for key in self.keys]
        return scheme.lower() == "bearer" and any(matches)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.protects(scope["path"]) and not self.authorized(scope):
            error = APIError(401, "unauthorized", "missing or invalid API key: send Authorization: Bearer <key>")
            return await reject(error, scope, receive, send)
        await self.app(scope, receive, send)


def undecodable_parameter(query_string: bytes) -> str | None:
    """The first query parameter whose name or value is not UTF-8 once percent-decoded (Starlette would
    read it as U+FFFD, and a model named so would be looked up as if sent); None when all are."""
    for name, value in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, encoding="latin-1"):
        try:
            name.encode("latin-1").decode(), value.encode("latin-1").decode()
        except UnicodeDecodeError:
            return name.encode("latin-1").decode(errors="replace")
    return None


class Utf8Query:
    """A query string is UTF-8 once percent-decoded, as a JSON body is: else 422 naming the parameter."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["query_string"] and (name := undecodable_parameter(scope["query_string"])) is not None:
            error = APIError(422, "invalid_request", f"{name}: not valid UTF-8 once percent-decoded", name)
            return await reject(error, scope, receive, send)
        await self.app(scope, receive, send)


class JsonBodyOnly:
    """Requests with a body must say ``application/json``: no form, no pickle, no guessing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            media_type = header(scope, b"content-type").split(";")[0].strip().lower()
            if media_type != "application/json":
                error = APIError(415, "unsupported_media_type", f"Content-Type must be application/json, not {media_type or 'missing'!r}")
                return await reject(error, scope, receive, send)
        await self.app(scope, receive, send)


class BodySizeLimit:
    """413 for a body over ``max_bytes``: by Content-Length up front, or counted while streaming. 503 for a body
    that would take the bytes this worker holds, of the bodies of the requests it reads or answers, past
    ``budget_bytes``: a body is held whole before admission (``ReadBodyFirst``), so without it a few thousand
    clients uploading at once would hold connections × ``max_bytes`` of memory. Bytes are counted as they
    arrive, not as declared: an upload that stalls holds its connection, not its Content-Length.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, budget_bytes: int) -> None:
        self.app, self.max_bytes, self.budget_bytes = app, max_bytes, budget_bytes
        self.held = 0  # bytes of the bodies of this worker's requests in progress

    def too_large(self) -> APIError:
        return APIError(413, "body_too_large", f"request body is larger than {self.max_bytes} bytes")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = header(scope, b"content-length")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await reject(self.too_large(), scope, receive, send)
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            size = len(message.get("body", b""))
            if received + size > self.max_bytes:
                raise self.too_large()
            if self.held + size > self.budget_bytes:
                raise over_body_budget(self.budget_bytes)
            received += size
            self.held += size
            return message

        try:
            await self.app(scope, counted, send)
        finally:
            self.held -= received


class ReadBodyFirst:
    """The whole body is read before the routes see the request, so that admission (each model's share of the
    worker: ``api/flow.py``) counts a request from the moment its body is complete: a slow upload holds a connection,
    never a slot. A body not complete within ``timeout_s`` gets 408 and its connection is closed.

    Once a request whose body was ``LARGE`` or more is answered, the C heap's free pages go back to the system
    (``models/memory.py``): such a body arrives in 64 KiB chunks and is parsed into as many objects, each under the
    mmap threshold, which glibc would keep amid the heap. Four concurrent 4.9 MB ``/tokenize`` bodies left the API
    workers 49-70 MiB larger in all without it, 0.3-17 MiB with it (``make hostile``'s ``tokenize_flood``, docs/reliability.md).

    Inside ``BodySizeLimit``, which counts what is read here (413 past the limit).
    """

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app, self.timeout_s = app, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            async with asyncio.timeout(self.timeout_s):
                messages = await read_body(receive)
        except TimeoutError:
            error = APIError(408, "body_timeout", f"request body not complete within {self.timeout_s:g} s")
            response = error_response(error, scope["path"])
            response.headers["connection"] = "close"  # the rest of the body is never read
            return await response(scope, receive, send)
        except APIError as error:
            return await reject(error, scope, receive, send)

        size = sum(len(message.get("body", b"")) for message in messages)

        async def replayed() -> Message:
            return messages.popleft() if messages else await receive()

        try:
            await self.app(scope, replayed, send)
        finally:
            if size >= LARGE:
                release_freed_memory()  # about 0.1 ms where there is little to give back


async def read_body(receive: Receive) -> deque[Message]:
    """The request's messages up to the end of its body (or to the client leaving), in order."""
    messages = deque([await receive()])
    while messages[-1]["type"] == "http.request" and messages[-1].get("more_body", False):
        messages.append(await receive())
    return messages


class CountAnswers:
    """Outermost: every answer of the API's routes counted by route and status, requests in flight gauged.

    The route label is the path when it is one of the ``routes()`` (read at the first request, once
    every route is declared), else ``other``: a label per unknown path would let any client grow
    the metrics without bound.
    """

    def __init__(self, app: ASGIApp, routes: Callable[[], Iterable[str]]) -> None:
        self.app, self.declared = app, routes

    @cached_property
    def routes(self) -> frozenset[str]:
        return frozenset(self.declared())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in self.routes else "other"
        status = 500  # if nothing is sent at all

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with telemetry.in_flight():
            try:
                await self.app(scope, receive, counted)
            except asyncio.CancelledError:
                status = CLIENT_GONE
                raise
            finally:
                telemetry.answered(route, status)


class CancelWhenGone:
    """Outermost: a request whose client disconnects before its answer starts is cancelled, so that
    nothing more is computed for nobody (``serving/gone.py``: the coalescer drops its texts not yet
    sent, the Encoder those it has not started); and every request's deadline is set from the
    timeout its client or proxy announced, 400 if malformed.

    Once the body is read, nothing else reads this request's messages, so a watcher waits for the
    next one: ``http.disconnect`` before the answer started means the client left.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        announced = {name: value for name in DEADLINE_HEADERS if (value := header(scope, name.encode()))}
        try:
            deadline.set(deadline_of(announced, settings.timeout_s, time.time()))
        except ValueError as error:
            return await reject(APIError(400, "invalid_request", str(error)), scope, receive, send)
        handler, body_read, answering, gone = asyncio.current_task(), asyncio.Event(), False, False

        async def reading() -> Message:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_read.set()
            return message

        async def answer(message: Message) -> None:
            nonlocal answering
            answering = True
            await send(message)

        async def watch() -> None:
            nonlocal gone
            await body_read.wait()
            if (await receive())["type"] == "http.disconnect" and not answering:
                gone = True
                telemetry.dropped("gone")
                handler.cancel()

        watcher = asyncio.create_task(watch())
        try:
            await self.app(scope, reading, answer)
        except asyncio.CancelledError:
            if not gone:  # the server is stopping: not ours to swallow
                raise
            handler.uncancel()  # the cancel was ours, and is over
            # Nobody reads it (uvicorn drops it), but BentoML's timeout middleware holds the request
            # open until something is sent: for its backstop timeout otherwise.
            await send({"type": "http.response.start", "status": CLIENT_GONE, "headers": []})
            await send({"type": "http.response.body", "body": b""})
        finally:
            watcher.cancel()


def guard(app: FastAPI) -> None:
    """The guards in front of ``app``'s routes, outermost first: work cancelled for clients gone and the
    deadline read, answers counted, queries that are not UTF-8 refused, JSON bodies only, at most
    ``max_body_bytes`` (and ``body_budget_bytes`` of them at once), read whole within ``body_timeout_s`` before any route runs."""
    app.add_middleware(ReadBodyFirst, timeout_s=settings.body_timeout_s)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, budget_bytes=settings.body_budget_bytes)
    app.add_middleware(JsonBodyOnly)
    app.add_middleware(Utf8Query)
    app.add_middleware(CountAnswers, routes=lambda: app.openapi()["paths"])  # the declared routes
    app.add_middleware(CancelWhenGone)


def protect(service: Any) -> None:
    """With keys set (``TEXTBENTO_API_KEYS``, ``_FILE``), every path of the BentoML ``service`` (the docs and the schema
    too) asks for one, but the probes, and ``/metrics`` unless ``TEXTBENTO_METRICS_PUBLIC`` is false."""
    if keys := settings.keys():
        open_paths = ("/livez", "/healthz", "/readyz", *(("/metrics",) if settings.metrics_public else ()))
        service.add_asgi_middleware(BearerAuth, keys=keys, open_paths=open_paths)
