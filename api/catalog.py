"""The models one server serves, and which of them answers a request.

A request names its model (``model``: the store name, the full tag, or the Hugging Face id it was
imported from) or names none; then the first served model that does the route's task answers, in
the order of ``TEXTBENTO_MODELS``. An unknown name is a 404 listing what is served; a model that
cannot do the route's task is a 400 ``wrong_task``, so a client never gets one model's kind of
answer from a route meant for another.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import bentoml
import numpy as np
from bentoml.exceptions import BentoMLException

from models.calibration import load_ranges
from models.spec import ModelSpec
from models.tasks import task_of
from models.tokenization import Side, SideTokenizer, TextTokenizer
from serving import socket_hop
from serving.coalesce import Coalescer
from serving.gone import Forgetter
from serving.hop import LoneCalls, resend_unanswered
from serving.settings import settings

from .errors import APIError
from .flow import Admission, unavailable

# What a route asks of a model: a reranker is a classifier with one label (a cross-encoder's score),
# or a multi-vector model (its MaxSim).
Need = Literal["embed", "sparse", "classify", "rerank", "multivector"]


@dataclass
class ServedModel:
    """One served model as an API worker holds it: what it is, its tokenizer, and its way to its Encoder."""

    name: str
    tag: str
    created: int
    spec: ModelSpec
    tokenizer: TextTokenizer
    calls: Coalescer[bytes, tuple[bytes, Any]]  # this model's Encoder calls, shared by concurrent requests
    encoder: Callable[[], Any]  # the Encoder's BentoML client (made when first used), for its runtime card
    forget: Callable[[int], None]  # tells the Encoder a request was given up (serving.gone.Forgetter)
    admission: Admission  # its share of the worker (``api/flow.py``)
    aliases: frozenset[str] = field(default_factory=frozenset)
    runtime_card: dict[str, Any] | None = None  # the Encoder's last answer to ``runtime()``
    ranges: np.ndarray | None = None  # an embedder's int8/uint8 calibration ranges (models.calibration)
    sides: dict[Side, SideTokenizer] = field(default_factory=dict)  # a multi-vector model's query and document tokenizers

    async def runtime(self, within_s: float = 2.0) -> dict[str, Any]:
        """How the Encoder serves the model (backend, device, precision, fidelity, CPU), asked now; where
        it does not answer within ``within_s`` (restarting after a crash, loading), its last answer, so
        that the model list and TEI's /info stay up while one Encoder restarts. 503 before any answer."""
        if not await self.answers(within_s) and self.runtime_card is None:
            raise unavailable(self.name)
        return self.runtime_card

    async def answers(self, within_s: float = 2.0) -> bool:
        """Whether its Encoder answers ``runtime()`` now, within ``within_s`` (it does once warmed up); its card kept."""
        try:
            self.runtime_card = await asyncio.wait_for(self.encoder().to_async.runtime(), within_s)
        except (TimeoutError, aiohttp.ClientError, BentoMLException):
            return False
        return True

    def does(self, need: Need) -> bool:
        return need in task_of(self.spec).route_families(self.spec)

    def what_it_does(self) -> str:
        """What it does, as an error message names it: ``'embed'``, ``'sparse'``, ``'rerank'``, ``'classify' (n labels)``
        or ``'multivector'`` with its routes (it has no single vector per text to give)."""
        return task_of(self.spec).what_it_does(self.spec)


def served_model(model: bentoml.models.BentoModel, encoder: Callable[[], Any]) -> ServedModel:
    """The stored ``model`` as an API worker serves it, through ``encoder`` (its Encoder's client, made when
    first called): its tokenizer, and its calls to the Encoder, shared by concurrent requests (``serving/coalesce.py``)."""
    stored = ModelSpec.of(model)
    spec = dataclasses.replace(stored, source=shown_source(stored.source))  # what /v1/models and /info show
    calls = socket_hop.calls(model.tag.name, http=lambda token_ids: encoder().to_async.encode(token_ids))
    encode = resend_unanswered(calls, settings.encoder_attempts, LoneCalls(model.tag.name))
    return ServedModel(
        name=model.tag.name,
        tag=str(model.tag),
        created=int(model.info.creation_time.timestamp()),
        spec=spec,
        tokenizer=TextTokenizer(model.path, spec.max_length),
        calls=Coalescer(encode, max_items=settings.max_batch_size, in_flight=settings.calls_in_flight),
        encoder=encoder,
        forget=Forgetter(lambda keys: encoder().to_async.forget(keys)),
        admission=Admission(model.tag.name, settings.max_concurrency),
        aliases=frozenset({model.tag.name, str(model.tag), stored.source, spec.source} - {""}),
        ranges=load_ranges(model.path),
        sides=task_of(spec).side_tokenizers(model.path, spec),
    )


def shown_source(source: str) -> str:
    """A model's source as clients see it: a Hub id (``org/name``) as it is, a local directory by its name
    only, so that no path of the machine it was imported on is shown."""
    if source.startswith(("/", "~", ".")) or source.count("/") > 1:
        return source.rstrip("/").rpartition("/")[2]
    return source


class Catalog(Sequence[ServedModel]):
    """The served models in their configured order."""

    def __init__(self, models: list[ServedModel]) -> None:
        self.models = models

    def __getitem__(self, index):  # type: ignore[override]
        return self.models[index]

    def __len__(self) -> int:
        return len(self.models)

    def __iter__(self) -> Iterator[ServedModel]:
        return iter(self.models)

    def listing(self) -> str:
        """The served models and what each does, as an error names them."""
        return "; ".join(f"{model.name!r}, which does {model.what_it_does()}" for model in self.models)

    def named(self, name: str | None) -> ServedModel:
        """The model ``name`` names (404 if none does); the first served when ``name`` is None."""
        if name is None:
            return self.models[0]
        found = next((model for model in self.models if name in model.aliases), None)
        if found is None:
            raise APIError(404, "model_not_found", f"model {name!r} is not served here; this server serves {self.listing()}", "model")
        return found

    def pick(self, name: str | None, need: Need) -> ServedModel:
        """The model that answers a route that needs ``need``: the one named, else the first that does it
        (for ``classify``, the first classifier before the first reranker, which a route may also read pairs with)."""
        if name is not None:
            found = self.named(name)
            if not found.does(need):
                raise APIError(400, "wrong_task", f"model {found.name!r} does {found.what_it_does()}, not {need!r}", "model")
            return found
        able = sorted((model for model in self.models if model.does(need)), key=lambda model: model.does("rerank"))
        if not able:
            raise APIError(400, "wrong_task", f"no model served here does {need!r}; this server serves {self.listing()}", "model")
        return able[0]
