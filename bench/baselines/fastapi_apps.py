"""Baselines (a) and (b): the seed article's FastAPI apps, one uvicorn worker each (``--factory``).

naive       ``async def`` routes with tokenization and inference inline (blocks the event loop)
threadpool  ``def`` routes: FastAPI runs them on its thread pool
"""

from __future__ import annotations

from fastapi import FastAPI

from bench.baselines.direct import Direct


def make_app(inline_async: bool) -> FastAPI:
    app, direct = FastAPI(), Direct()

    def embeddings(body: dict) -> dict:
        return direct.embed(body["input"] if isinstance(body["input"], list) else [body["input"]])

    def classify(body: dict) -> dict:
        return direct.classify(body["inputs"] if isinstance(body["inputs"], list) else [body["inputs"]])

    def rerank(body: dict) -> dict:
        return direct.rerank(body["query"], body["documents"])

    for path, handler in (("/v1/embeddings", embeddings), ("/v1/classify", classify), ("/v1/rerank", rerank)):
        if inline_async:

            async def endpoint(body: dict, handler=handler) -> dict:
                return handler(body)

        else:
            endpoint = handler
        app.post(path)(endpoint)
    app.get("/readyz")(lambda: {"ready": True})  # the model loaded with the app
    return app


def naive() -> FastAPI:
    return make_app(inline_async=True)


def threadpool() -> FastAPI:
    return make_app(inline_async=False)
