"""What the served model is, as recorded in (and read back from) BentoML model metadata."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

Task = Literal["classify", "embed"]
Pooling = Literal["mean", "cls", "max"]

TASKS: tuple[Task, ...] = ("classify", "embed")
POOLINGS: tuple[Pooling, ...] = ("mean", "cls", "max")


@dataclass(frozen=True)
class ModelSpec:
    """Everything the service needs to know to run a stored model and shape its answers.

    ``labels`` is the classifier's ``id2label`` in index order (empty for embedders);
    ``pooling``/``normalize``/``dimensions`` describe the embedding (ignored for classifiers);
    ``pad_id`` is the tokenizer's padding id, which the runner needs without loading the tokenizer.
    """

    task: Task
    max_length: int
    labels: tuple[str, ...] = ()
    pooling: Pooling = "mean"
    normalize: bool = False
    dimensions: int | None = None
    pad_id: int = 0
    source: str = ""
    revision: str | None = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; expected one of {TASKS}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {self.pooling!r}; expected one of {POOLINGS}")
        if self.max_length < 2:
            raise ValueError(f"max_length must be at least 2, got {self.max_length}")
        if self.task == "classify" and len(self.labels) < 1:
            raise ValueError("a classifier needs at least one label")

    def to_metadata(self) -> dict[str, Any]:
        # The store accepts no None values: unset fields are left out and default on the way back.
        data = {key: value for key, value in dataclasses.asdict(self).items() if value is not None}
        data["labels"] = list(self.labels)
        return data

    @classmethod
    def of(cls, stored: Any) -> ModelSpec:
        """The spec recorded at import time in a stored ``bentoml.Model``'s metadata."""
        return cls.from_metadata(stored.info.metadata)

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> ModelSpec:
        known = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in metadata.items() if key in known}
        values["labels"] = tuple(values.get("labels") or ())
        return cls(**values)
