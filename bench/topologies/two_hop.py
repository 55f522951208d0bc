"""The rejected topology, kept runnable for the comparison in docs/design.md.

A dedicated Tokenizer service (N workers) between the API and the Encoder: the API service
(one worker) makes two inter-process hops per request, tokenizer then encoder. Same routes,
same model code; only ``tokenize`` differs from ``service.TextBento``.

    bentoml serve bench.topologies.two_hop:TwoHopTextBento
"""

from __future__ import annotations

import bentoml

from models.spec import ModelSpec
from models.tokenization import Encoded, TextTokenizer
from service import MODEL, NEVER_RECYCLE, NO_ACCESS_LOG, TextBento, app
from serving.settings import settings


@bentoml.service(
    name="tokenizer",
    workers=settings.workers,
    traffic={"timeout": settings.timeout_s},
    logging=NO_ACCESS_LOG,
    runner_connection=NEVER_RECYCLE,
)
class Tokenizer:
    model = MODEL

    def __init__(self) -> None:
        self.tokenizer = TextTokenizer(self.model.path, ModelSpec.of(self.model).max_length)

    @bentoml.api
    def tokenize(self, texts: list[str]) -> list:  # (ids, truncated) pairs; pickled between services
        return [(e.ids, e.truncated) for e in self.tokenizer.encode(texts)]


@bentoml.service(name="textbento", workers=1, traffic={"timeout": settings.timeout_s}, logging=NO_ACCESS_LOG)
@bentoml.asgi_app(app)
class TwoHopTextBento(TextBento.inner):
    tokenizer_service = bentoml.depends(Tokenizer)

    async def tokenize(self, texts: list[str]) -> list[Encoded]:
        return [Encoded(ids, truncated) for ids, truncated in await self.tokenizer_service.to_async.tokenize(texts)]
