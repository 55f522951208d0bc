"""ASGI guards in front of the routes, each answering with the one error shape before any work starts."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterable
from functools import cached_property

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serving.telemetry import telemetry

from .errors import APIError, error_response

logger = logging.getLogger("textbento")


async def reject(error: APIError, scope: Scope, receive: Receive, send: Send) -> None:
    await error_response(error, scope["path"])(scope, receive, send)


def header(scope: Scope, name: bytes) -> str:
    return next((value.decode("latin-1") for key, value in scope["headers"] if key == name), "")


class BearerAuth:
    """``Authorization: Bearer <key>`` on the protected paths (``prefixes``, and ``paths`` exactly); 401 otherwise.

    Keys are compared with ``hmac.compare_digest`` against every configured key, so the time
    taken says nothing about how much of a key matched.
    """

    def __init__(self, app: ASGIApp, keys: Iterable[str], prefixes: tuple[str, ...], paths: Iterable[str] = ()) -> None:
        self.app, self.prefixes, self.paths = app, prefixes, frozenset(paths)
        self.keys = [key.encode() for key in keys]

    def protects(self, path: str) -> bool:
        return path in self.paths or path.startswith(self.prefixes)

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
    """413 for bodies over ``max_bytes``: by Content-Length up front, or counted while streaming."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

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
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise self.too_large()
            return message

        await self.app(scope, counted, send)


class AdmissionLimit:
    """At most ``limit`` requests in flight in this worker; the next gets 429 with Retry-After."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit, self.in_flight = app, limit, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.in_flight >= self.limit:
            error = APIError(429, "too_many_requests", f"over {self.limit} requests in flight; retry shortly", retry_after=1)
            return await reject(error, scope, receive, send)
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


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
            finally:
                telemetry.answered(route, status)
