"""What the served model is, as recorded in (and read back from) BentoML model metadata."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

Task = Literal["classify", "embed", "sparse", "multivector"]
Pooling = Literal["mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken"]
Activation = Literal["softmax", "sigmoid"]

TASKS: tuple[Task, ...] = ("classify", "embed", "sparse", "multivector")
POOLINGS: tuple[Pooling, ...] = ("mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken")
DenseActivation = Literal["identity", "tanh", "relu", "sigmoid"]
ACTIVATIONS: tuple[Activation, ...] = ("softmax", "sigmoid")
# sentence-transformers' SpladePooling: how token weights are pooled, and ``log1p_relu`` = log1p once more.
SparsePooling = Literal["max", "sum"]
SparseActivation = Literal["relu", "log1p_relu"]
SPARSE_POOLINGS: tuple[SparsePooling, ...] = ("max", "sum")
SPARSE_ACTIVATIONS: tuple[SparseActivation, ...] = ("relu", "log1p_relu")


@dataclass(frozen=True)
class ModelSpec:
    """Everything the service needs to know to run a stored model and shape its answers.

    ``labels`` is the classifier's ``id2label`` in index order (empty for embedders), and
    ``activation`` turns its logits into scores as its libraries do: a sigmoid per label for one
    logit (cross-encoders) and multi-label models, a softmax over the labels otherwise;
    ``token_types``: the classifier tells the two texts of a pair apart by token type ids (BERT's
    segments; cross-encoders need them). ``pooling``/``normalize``/``dimensions`` describe the
    embedding, ``dense`` the activations of sentence-transformers Dense modules after pooling
    (their weights in ``dense.npz``, ``models.postprocess``), ``prompts`` (name → text put before the input) and ``default_prompt_name`` are
    sentence-transformers' (ignored for classifiers). ``sparse_pooling``/``sparse_activation`` are a
    SPLADE model's ``SpladePooling`` settings (its ``dimensions``: the vocabulary). ``pad_id`` is the tokenizer's padding id,
    which the runner needs without loading the tokenizer.

    A multi-vector (PyLate / ColBERT) model gives a vector per token, through its ``dense`` layers and
    unit length each; ``max_length`` is its document length, ``query_length`` its query length, each
    counting the prefix token (``query_prefix_id``/``document_prefix_id``, put after the first token;
    None: no prefix). ``expansion_id`` pads a query up to ``query_length`` (None: no query expansion),
    tokens that the query's own tokens attend to only where ``attend_to_expansion``; ``skiplist``: the
    ids whose vectors a document leaves out (punctuation).
    """

    task: Task
    max_length: int
    labels: tuple[str, ...] = ()
    activation: Activation = "softmax"
    token_types: bool = False
    pooling: Pooling = "mean"
    normalize: bool = False
    dimensions: int | None = None
    dense: tuple[DenseActivation, ...] = ()
    sparse_pooling: SparsePooling = "max"
    sparse_activation: SparseActivation = "relu"
    prompts: dict[str, str] = dataclasses.field(default_factory=dict)
    default_prompt_name: str | None = None
    pad_id: int = 0
    query_length: int | None = None
    query_prefix_id: int | None = None
    document_prefix_id: int | None = None
    expansion_id: int | None = None
    attend_to_expansion: bool = False
    skiplist: tuple[int, ...] = ()
    source: str = ""
    revision: str | None = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; expected one of {TASKS}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; expected one of {ACTIVATIONS}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {self.pooling!r}; expected one of {POOLINGS}")
        if self.sparse_pooling not in SPARSE_POOLINGS or self.sparse_activation not in SPARSE_ACTIVATIONS:
            raise ValueError(f"unknown SPLADE pooling {self.sparse_pooling!r} or activation {self.sparse_activation!r}")
        if self.max_length < 2:
            raise ValueError(f"max_length must be at least 2, got {self.max_length}")
        if self.task == "classify" and len(self.labels) < 1:
            raise ValueError("a classifier needs at least one label")
        if self.task == "multivector" and (self.query_length or 0) < 2:
            raise ValueError(f"a multi-vector model needs a query_length of at least 2, got {self.query_length}")
        if self.default_prompt_name is not None and self.default_prompt_name not in self.prompts:
            raise ValueError(f"the default prompt {self.default_prompt_name!r} is not one of the prompts {sorted(self.prompts)}")

    def to_metadata(self) -> dict[str, Any]:
        # The store accepts no None values: unset fields are left out and default on the way back.
        data = {key: value for key, value in dataclasses.asdict(self).items() if value is not None}
        data["labels"] = list(self.labels)
        data["dense"] = list(self.dense)
        data["skiplist"] = list(self.skiplist)
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
        values["dense"] = tuple(values.get("dense") or ())
        values["skiplist"] = tuple(values.get("skiplist") or ())
        # Stored before the activation was recorded: one logit was always a sigmoid's.
        values.setdefault("activation", "sigmoid" if len(values["labels"]) == 1 else "softmax")
        return cls(**values)
