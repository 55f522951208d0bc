"""Baseline (c): a plain one-service BentoML app, inference in the endpoint, no batching."""

from __future__ import annotations

import bentoml

from bench.baselines.direct import Direct


@bentoml.service(name="plain")
class Plain:
    def __init__(self) -> None:
        self.direct = Direct()

    @bentoml.api(route="/v1/embeddings")
    def embeddings(self, input: list[str]) -> dict:
        return self.direct.embed(input)

    @bentoml.api(route="/v1/classify")
    def classify(self, inputs: list[str]) -> dict:
        return self.direct.classify(inputs)
