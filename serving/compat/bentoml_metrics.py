"""BentoML's HTTP metrics labelled by route, not by raw path.

BentoML's HTTP metrics (``bentoml_service_request_*``, the Encoder's too) label each request with
its raw path, so any client, with or without a key, adds series to every scrape with
``GET /anything-<uuid>``. Here the label is the template of the route that answers the path
(``/v1/embeddings``, ``/static_content/{path}``), or ``other`` where none does.

Refuses to start when the installed BentoML no longer has what it replaces.
"""

from __future__ import annotations

import inspect
from typing import Any

from bentoml._internal.server.http import instruments
from starlette.routing import BaseRoute, Match, Mount

# The label of a path no route answers, as textbento's own request counter names it (api/middleware.CountAnswers).
UNROUTED = "other"
# The request's own scope, inside the copy BentoML's metrics middleware labels from (``label_metrics_by_route``).
REQUEST_SCOPE = "textbento.request_scope"
# What BentoML's metrics middleware labels a request with, and how it passes the request on.
PATH_LABEL, PASSED_ON = 'endpoint = scope["path"]', "await self.app(scope, wrapped_receive, wrapped_send)"
# BentoML's own, as it was before any patch (tests/test_compat.py checks it still labels by raw path).
STOCK_METRICS_CALL = instruments.RunnerTrafficMetricsMiddleware.__call__


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
        return await STOCK_METRICS_CALL(self, scope, receive, send)
    if not isinstance(self.app, RequestScope):
        self.app = RequestScope(self.app)
    await STOCK_METRICS_CALL(self, {**scope, "path": label, REQUEST_SCOPE: scope}, receive, send)


def apply() -> None:
    """BentoML's HTTP metrics label each request with its route's template, or ``other``, from now on (twice changes nothing)."""
    middleware = instruments.RunnerTrafficMetricsMiddleware
    if middleware.__call__ is _labelled_by_route:
        return
    source = inspect.getsource(middleware.__call__)
    if middleware.__call__ is not STOCK_METRICS_CALL or source.count(PATH_LABEL) != 1 or PASSED_ON not in source:
        raise RuntimeError("BentoML's RunnerTrafficMetricsMiddleware changed: serving/compat/bentoml_metrics.py no longer applies")
    middleware.__call__ = _labelled_by_route
