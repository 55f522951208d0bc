"""The task registry: every stored task has its module, each module's routes and answers, and the product
asks a spec's task (``models.tasks.task_of``) rather than testing its name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models.spec import TASKS as STORED_TASKS
from models.spec import ModelSpec
from models.tasks import TASKS, task_of

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("api", "models", "serving", "bulk", "service.py")
REGISTRY = ROOT / "models" / "tasks"
# A branch on a task's name: ``spec.task == "embed"``, ``task != "classify"``, ``task in ("embed", ...)``.
TASK_BRANCH = re.compile(r"task ?(==|!=|in) |\.task ?(==|!=|in)|task in \(")
MOST_BRANCHES_OUTSIDE = 5

CLASSIFIER = ModelSpec(task="classify", max_length=16, labels=("negative", "positive"))
RERANKER = ModelSpec(task="classify", max_length=16, labels=("relevant",), activation="sigmoid")
EMBEDDER = ModelSpec(task="embed", max_length=16, pooling="cls")
SPLADE = ModelSpec(task="sparse", max_length=16, dimensions=30522)
COLBERT = ModelSpec(task="multivector", max_length=16, query_length=8)


def test_every_stored_task_has_its_module_under_its_name():
    assert set(TASKS) == set(STORED_TASKS)
    assert all(task.name == name for name, task in TASKS.items())


def test_an_import_asks_the_most_specific_task_first():
    assert list(TASKS)[-1] == "embed"  # it takes any model the others leave


@pytest.mark.parametrize(
    ("spec", "families"),
    [
        (CLASSIFIER, {"classify"}),
        (RERANKER, {"classify", "rerank"}),
        (EMBEDDER, {"embed"}),
        (SPLADE, {"sparse"}),
        (COLBERT, {"multivector", "rerank"}),
    ],
)
def test_the_routes_each_task_serves(spec, families):
    assert task_of(spec).route_families(spec) == families


def test_what_each_task_does_as_an_error_names_it():
    assert [task_of(spec).what_it_does(spec) for spec in (CLASSIFIER, RERANKER, EMBEDDER, SPLADE)] == [
        "'classify' (2 labels)",
        "'rerank'",
        "'embed'",
        "'sparse'",
    ]
    assert task_of(COLBERT).what_it_does(COLBERT).startswith("'multivector' (a vector per token")


def test_tei_model_type_and_root_route_of_each_task():
    assert task_of(EMBEDDER).tei_model_type(EMBEDDER) == {"embedding": {"pooling": "cls"}}
    assert task_of(SPLADE).tei_model_type(SPLADE) == {"embedding": {"pooling": "splade"}}
    assert task_of(COLBERT).tei_model_type(COLBERT) == {"embedding": {"pooling": "none"}}
    assert task_of(RERANKER).tei_model_type(RERANKER) == {"reranker": {"id2label": {0: "relevant"}, "label2id": {"relevant": 0}}}
    assert list(task_of(CLASSIFIER).tei_model_type(CLASSIFIER)) == ["classifier"]
    texts = {"inputs": "a text"}
    assert [task_of(spec).tei_root_route(spec, texts) for spec in (CLASSIFIER, RERANKER, EMBEDDER, SPLADE, COLBERT)] == [
        "predict",
        "rerank",
        "embed",
        "embed_sparse",
        "embed_all",
    ]
    assert task_of(EMBEDDER).tei_root_route(EMBEDDER, {"inputs": {"source_sentence": "a", "sentences": ["b"]}}) == "similarity"
    assert task_of(COLBERT).tei_root_route(COLBERT, {"query": "q", "texts": ["d"]}) == "rerank"


def test_what_each_graph_answers():
    assert {name: (task.graph_output, task.per_token_output) for name, task in TASKS.items()} == {
        "classify": ("logits", False),
        "embed": ("last_hidden_state", True),
        "sparse": ("sparse_embedding", False),
        "multivector": ("token_embeddings", True),
    }
    hidden = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    assert task_of(EMBEDDER).graph_answer(EMBEDDER, hidden, mask, [], 3).tolist() == hidden[:, 0].tolist()  # cls pooling
    assert task_of(COLBERT).graph_answer(COLBERT, hidden[:, :2], mask, [], 3).shape == (2, 3, 4)  # padded to the batch's width
    logits = hidden[:, 0]
    assert task_of(CLASSIFIER).graph_answer(CLASSIFIER, logits, mask, [], 3) is logits  # as the graph answers them


def test_only_embedders_pool_a_dense_vector_per_text():
    assert [name for name, task in TASKS.items() if task.dense_vector_per_text] == ["embed"]
    assert [task_of(spec).sentence_pooling(spec) for spec in (CLASSIFIER, EMBEDDER, SPLADE, COLBERT)] == [None, "cls", None, None]


def test_the_registry_loads_no_inference_runtime():
    """API workers read the routes' rules: they must not pull torch, transformers or ONNX Runtime in."""
    script = "import sys, models.tasks; print([m for m in ('torch', 'transformers', 'onnxruntime', 'onnx') if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def task_branches() -> list[str]:
    paths = [path for part in PRODUCT for path in ([ROOT / part] if part.endswith(".py") else (ROOT / part).rglob("*.py"))]
    return [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in paths
        if REGISTRY not in path.parents
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if TASK_BRANCH.search(line)
    ]


def test_the_product_asks_the_task_rather_than_testing_its_name():
    """A new task is one module and one line in ``TASKS``: few places outside it may test a task's name."""
    branches = task_branches()
    assert len(branches) <= MOST_BRANCHES_OUTSIDE, branches
