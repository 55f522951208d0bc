"""What the served model is, as recorded in (and read back from) BentoML model metadata."""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

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
logger = logging.getLogger("textbento")

# The per-text cap an import picks where the model itself reads longer texts: the longest length, in
# steps of CAP_STEP tokens, whose forward pass at the token budget fits PASS_MEMORY (``memory_cap``).
# A pass holds its tokens' intermediates: eager attention (the ONNX graphs' kind) keeps heads × length
# scores per token, the layers [tokens, width] (the FFN's, or a SPLADE model's vocabulary logits), and
# ONNX Runtime held about COPIES of each at its peak (measured on tiny random Qwen3 graphs against
# this formula: docs/design.md 12). Texts up to the budget share a pass of budget tokens, so the budget counts for any
# length below it: REFERENCE_BUDGET is TEXTBENTO_TOKEN_BUDGET's default.
PASS_MEMORY = 2 * 2**30  # half of the shipped pod's 4 GiB limit (deploy/kubernetes): the weights and API workers share the rest
COPIES = 4
REFERENCE_BUDGET = 2048
CAP_STEP = 256
CAP_FLOOR = 512  # never below what BERT-size models read: only long limits are capped


class Shape(NamedTuple):
    """What one pass's memory grows with: attention heads, and the widest [tokens, width] intermediate."""

    heads: int
    width: int


def shape_of(config: dict[str, Any], task: Task) -> Shape:
    """The shape of a transformers ``config.json`` (its keys as each architecture names them)."""

    def first(*keys: str) -> int:
        return next((int(config[key]) for key in keys if config.get(key)), 0)

    hidden = first("hidden_size", "n_embd", "dim", "d_model")
    ffn = first("intermediate_size", "n_inner", "hidden_dim", "ffn_dim") or 4 * hidden
    vocabulary = first("vocab_size") if task == "sparse" else 0  # SPLADE's [tokens, vocabulary] logits stay inside the pass
    return Shape(first("num_attention_heads", "n_head", "n_heads") or 1, max(hidden, ffn, vocabulary))


def pass_bytes(length: int, shape: Shape, budget: int = REFERENCE_BUDGET) -> int:
    """About what ONNX Runtime holds at the peak of a pass of texts of ``length`` tokens (alone past the budget)."""
    tokens = max(length, budget)
    return 4 * COPIES * tokens * (shape.heads * length + shape.width)


def memory_cap(limit: int, shape: Shape) -> int:
    """The longest length up to ``limit`` whose pass fits ``PASS_MEMORY`` (in steps of ``CAP_STEP``; at least ``CAP_FLOOR``)."""
    if pass_bytes(limit, shape) <= PASS_MEMORY:
        return limit
    fits = next((length for length in range(limit // CAP_STEP * CAP_STEP, 0, -CAP_STEP) if pass_bytes(length, shape) <= PASS_MEMORY), 0)
    return max(fits, min(limit, CAP_FLOOR))


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
    which the Encoder needs without loading the tokenizer. ``max_length`` is the most tokens per text served (longer
    ones are cut, or refused without truncation), ``model_max_length`` what the model itself reads (its position
    table, or its tokenizer's limit): the import serves less where one pass of that length would not fit its
    memory (``memory_cap``), unless told otherwise (``--max-length``).

    A multi-vector (PyLate / ColBERT) model gives a vector per token, through its ``dense`` layers and
    unit length each; ``max_length`` is its document length, ``query_length`` its query length, each
    counting the prefix token (``query_prefix_id``/``document_prefix_id``, put after the first token;
    None: no prefix). ``expansion_id`` pads a query up to ``query_length`` (None: no query expansion),
    tokens that the query's own tokens attend to only where ``attend_to_expansion``; ``skiplist``: the
    ids whose vectors a document leaves out (punctuation).
    """

    task: Task
    max_length: int
    model_max_length: int | None = None  # None: max_length
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
        if self.model_max_length is None:
            object.__setattr__(self, "model_max_length", self.max_length)
        elif self.max_length > self.model_max_length:
            raise ValueError(f"max_length {self.max_length} is past the model's own limit of {self.model_max_length} tokens")
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
        return cls.from_metadata(stored.info.metadata, Path(stored.path))

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any], model_dir: Path | None = None) -> ModelSpec:
        """The spec in ``metadata``; one recorded without a cap (``model_max_length`` absent) is capped as an
        import would cap it now, from the ``config.json`` in ``model_dir``."""
        known = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in metadata.items() if key in known}
        values["labels"] = tuple(values.get("labels") or ())
        values["dense"] = tuple(values.get("dense") or ())
        values["skiplist"] = tuple(values.get("skiplist") or ())
        # Stored before the activation was recorded: one logit was always a sigmoid's.
        values.setdefault("activation", "sigmoid" if len(values["labels"]) == 1 else "softmax")
        if "model_max_length" not in values and model_dir is not None:
            values["model_max_length"] = values["max_length"]
            values["max_length"] = capped_as_imported_now(model_dir, values["task"], values["max_length"])
        return cls(**values)


def capped_as_imported_now(model_dir: Path, task: Task, max_length: int) -> int:
    """The cap of a model stored without one: ``memory_cap`` of its stored limit (kept where its config cannot be read)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return max_length
    capped = memory_cap(max_length, shape_of(config, task))
    if capped < max_length:
        logger.warning(
            "%s was imported without a per-text cap: serving at most %d of its %d tokens per text, as an import would now; "
            "import it again with --max-length to choose",
            f"{model_dir.parent.name}:{model_dir.name}",  # the store keeps a version in <name>/<version>
            capped,
            max_length,
        )
    return capped
