"""How BentoML learns of the Encoders: a service per served model, and the API service's dependency on each.

BentoML finds a service's stored models and dependencies only as attributes of its class, read when the
service is made. Their number comes from the settings (``TEXTBENTO_MODELS``), so these functions make
the attributes instead of ``service.py`` writing them out: a subclass per model that names it, and on
the API service's class one model and one ``bentoml.depends`` per Encoder.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import bentoml

from .gpus import gpu_share

T = TypeVar("T", bound=type)
ENCODER_ATTRIBUTES = "_encoder_attributes"  # on the API service's class: the attribute names of each Encoder's model and client


def encoder_service(encoder: type, tag: str, served: int, **config: Any) -> bentoml.Service:
    """``encoder`` serving the stored model ``tag``, as the BentoML service of one of ``served`` models:
    a GPU each, or a share of the first; named ``encoder`` when it is the only one."""
    model = bentoml.models.BentoModel(tag)
    name = "encoder" if served == 1 else f"encoder-{model.tag.name}"
    serving_one_model = type(encoder.__name__, (encoder,), {"model": model, "__doc__": encoder.__doc__})
    return bentoml.service(name=name, workers=1, resources={"gpu": gpu_share(served)}, **config)(serving_one_model)


def depends_on_each(encoders: list[bentoml.Service]) -> Callable[[T], T]:
    """A class decorator: the class's service depends on each of ``encoders`` and stores each one's model."""

    def add(cls: T) -> T:
        names = []
        for index, encoder in enumerate(encoders):
            names.append((f"model_{index}", f"encoder_{index}"))
            setattr(cls, names[-1][0], encoder.inner.model)
            setattr(cls, names[-1][1], bentoml.depends(encoder))
        setattr(cls, ENCODER_ATTRIBUTES, names)
        return cls

    return add


def encoders_of(service: object) -> list[tuple[bentoml.models.BentoModel, Callable[[], Any]]]:
    """Per Encoder of ``service`` (an instance of a class ``depends_on_each`` decorated): its stored model,
    and its BentoML client, looked up when first called (the client grows its methods as its connection first opens)."""
    return [(getattr(service, model), partial(getattr, service, client)) for model, client in getattr(type(service), ENCODER_ATTRIBUTES)]
