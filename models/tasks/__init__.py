"""The tasks a served model does, one module each, in one table.

Each task's module owns its rules (``base.Task`` lists them): how an import recognises it, what its
graph answers, how the self-check compares a fast graph with fp32, and which routes it serves. Code
elsewhere asks the task of a spec (``task_of``) instead of testing its name. A new task is a module
here and a line in ``TASKS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..spec import ModelSpec
from .base import Task
from .classify import Classify
from .embed import Embed
from .multivector import Multivector
from .sparse import Sparse

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# In the order an import asks them whether a model is theirs: the most specific first (``Embed`` takes any).
TASKS: dict[str, Task] = {task.name: task for task in (Multivector(), Sparse(), Classify(), Embed())}


def task_of(spec: ModelSpec) -> Task:
    """The task ``spec`` is served as."""
    return TASKS[spec.task]


def detect_task(model_dir: Path, config: PretrainedConfig, asked: str = "auto") -> Task:
    """The task the model in ``model_dir`` is imported as: ``asked`` (``--task``), else the first that recognises it."""
    from ..detection import check_architecture

    check_architecture(config)  # an unsupported architecture is the first thing to report
    if asked == "auto":
        return next(task for task in TASKS.values() if task.recognizes(model_dir, config))
    if asked not in TASKS:
        raise ValueError(f"unknown task {asked!r}; expected one of {tuple(TASKS)}")
    return TASKS[asked]


def detect_spec(
    model_dir: Path,
    config: PretrainedConfig,
    tokenizer_limit: int,
    pad_id: int | None,
    *,
    eos_id: int | None = None,
    tokenizer: Any = None,
    task: str = "auto",
    max_length: int | None = None,
    source: str = "",
    revision: str | None = None,
) -> ModelSpec:
    """The full spec of the model in ``model_dir``; raises ``UnsupportedModel`` with a reason.

    ``task``: ``--task``, or ``auto`` for the first task that recognises the model; every task's rule may
    refuse the import as asked first (a SPLADE model imported as an embedder). ``pad_id``, ``eos_id``: the
    tokenizer's (``tokenizer`` itself for a ColBERT's prefixes and skiplist); ``max_length``: the import's
    choice, within the model's limit (else its preferred length within its memory cap).
    """
    from ..detection import read_lengths, read_pad_id

    for rules in TASKS.values():
        rules.check_import(model_dir, config, task)
    chosen = detect_task(model_dir, config, task)
    lengths = read_lengths(config, tokenizer_limit, max_length, chosen.name)
    common: dict[str, Any] = {
        "task": chosen.name,
        "pad_id": read_pad_id(config, chosen.decoder_reads_pad_id, pad_id, eos_id),
        "model_max_length": lengths.own,
        "source": source,
        "revision": revision,
    }
    return chosen.detected_spec(model_dir, config, tokenizer, lengths, common)
