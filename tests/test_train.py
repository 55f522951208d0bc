"""Fine-tuning from the user's own data (train_import/train_*.py): bad data refused with one line and
nothing stored; a slice of the example dataset trained, stored and served with its new labels."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import requests

from tests.conftest import here, running

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support_tickets"
LABELS = ["account_access", "billing", "bug_report", "feature_request", "shipping"]


def stored_models() -> list[str]:
    import bentoml

    return sorted(str(model.tag) for model in bentoml.models.list())


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="") as out:
        csv.writer(out).writerows([header, *rows])
    return path


def slice_of(source: Path, per_label: int, out: Path) -> Path:
    """The first ``per_label`` rows of each label (tickets) or the first ``per_label`` rows (pairs)."""
    with open(source, newline="") as rows_in:
        rows = list(csv.DictReader(rows_in))
    if "label" in rows[0]:
        rows = [row for label in LABELS for row in [r for r in rows if r["label"] == label][:per_label]]
    else:
        rows = rows[:per_label]
    return write_csv(out, list(rows[0]), [list(row.values()) for row in rows])


BAD = {
    "missing file": lambda d: ["--data", str(d / "nope.csv")],
    "missing column": lambda d: ["--data", str(write_csv(d / "t.csv", ["body", "label"], [["a", "x"], ["b", "y"]]))],
    "empty file": lambda d: ["--data", str(write_csv(d / "t.csv", ["text", "label"], []))],
    "one label": lambda d: ["--data", str(write_csv(d / "t.csv", ["text", "label"], [["a", "x"], ["b", "x"], ["c", "x"]]))],
    "a label with one example": lambda d: ["--data", str(write_csv(d / "t.csv", ["text", "label"], [["a", "x"], ["b", "x"], ["c", "y"]]))],
    "eval label unseen in training": lambda d: [
        "--data",
        str(write_csv(d / "t.csv", ["text", "label"], [["a", "x"], ["b", "x"], ["c", "y"], ["d", "y"]])),
        "--eval",
        str(write_csv(d / "e.csv", ["text", "label"], [["e", "x"], ["f", "z"]])),
    ],
    "not UTF-8": lambda d: ["--data", str((d / "t.csv").write_bytes(b"text,label\n\xff\xfe caf\xe9,x\n") and d / "t.csv")],
    "empty text": lambda d: ["--data", str(write_csv(d / "t.csv", ["text", "label"], [["a", "x"], ["  ", "x"], ["c", "y"], ["d", "y"]]))],
    "JSONL line not JSON": lambda d: ["--data", str((d / "t.jsonl").write_text('{"text": "a", "label": "x"}\n{oops\n') and d / "t.jsonl")],
}
MESSAGES = {
    "missing file": "no such file",
    "missing column": "has no column 'text'",
    "empty file": "has no rows",
    "one label": "needs at least two",
    "a label with one example": "label 'y' has one example",
    "eval label unseen in training": "labels the training data has not: 'z'",
    "not UTF-8": "is not UTF-8",
    "empty text": "row 2: 'text' is empty",
    "JSONL line not JSON": "line 2 is not JSON",
}


@pytest.mark.parametrize("command", ["train_classifier", "train_embedder"])
def test_help_describes_every_option(command, capsys):
    module = __import__(f"train_import.{command}", fromlist=["main"])
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and all(option in out for option in ("--data", "--name", "--eval", "--base", "--epochs", "--seed"))


@pytest.mark.parametrize("case", list(BAD))
def test_bad_data_gets_one_line_and_nothing_is_stored(case, tmp_path, capsys):
    from train_import import train_classifier

    before = stored_models()
    assert train_classifier.main([*BAD[case](tmp_path), "--name", "never-stored"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("training failed: ") and "\n" not in err and MESSAGES[case] in err, err
    assert stored_models() == before


def test_the_embedder_refuses_a_missing_column_in_one_line_before_it_loads_a_model(tmp_path, capsys, monkeypatch):
    from train_import import train_embedder

    monkeypatch.setattr(train_embedder, "resolve_base", lambda base: pytest.fail("the base model was looked up before the data"))
    data = write_csv(tmp_path / "p.csv", ["question", "positive"], [["a", "b"]])
    assert train_embedder.main(["--data", str(data), "--name", "never"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [f"training failed: {data} has no column 'anchor' (it has: question, positive)"]


@pytest.fixture(scope="module")
def classifier_tag(tmp_path_factory):
    data = slice_of(EXAMPLE / "tickets.csv", 16, tmp_path_factory.mktemp("tickets") / "tickets.csv")
    result = here("train_classifier", "--data", str(data), "--name", "tickets-test", "--epochs", "4", "--patience", "4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "majority-class baseline: accuracy 0.200" in result.stderr and "fine-tuned: accuracy" in result.stderr
    return result.stdout.strip()


@pytest.mark.slow  # trains a model
def test_the_trained_classifier_is_stored_with_its_labels_and_run(classifier_tag):
    import bentoml

    stored = bentoml.models.get(classifier_tag)
    assert stored.info.metadata["labels"] == LABELS
    training = stored.info.metadata["training"]
    assert training["kind"] == "classifier" and training["train_examples"] + training["eval_examples"] == 16 * 5
    assert len(training["data_sha256"]) == 64 and training["options"]["epochs"] == 4 and "torch" in training["versions"]
    assert training["scores"]["accuracy"] > training["baseline"]["accuracy"]  # learnt something in 4 short epochs
    assert set(training["scores"]["per_label"]) == set(LABELS)
    assert (Path(stored.path) / "onnx").is_dir()  # served by the default backend like any import


@pytest.fixture(scope="module")
def embedder_tag(tmp_path_factory):
    import bentoml

    data = slice_of(EXAMPLE / "pairs.csv", 60, tmp_path_factory.mktemp("pairs") / "pairs.csv")
    result = here("train_embedder", "--data", str(data), "--name", "pairs-test", "--epochs", "1", "--batch-size", "16")
    assert result.returncode == 0, result.stderr[-3000:]
    tag = result.stdout.strip()
    training = bentoml.models.get(tag).info.metadata["training"]
    assert training["kind"] == "embedder" and set(training["before"]) == set(training["scores"]) == {"recall@1", "recall@5"}
    assert json.dumps(training["before"]) in result.stderr.replace("'", '"')
    return tag


@pytest.mark.slow  # trains a model
def test_the_trained_embedder_is_stored_with_its_scores_before_and_after(embedder_tag):
    """The fixture holds the training's record; stored like any import, the default backend's graphs included."""
    import bentoml

    assert (Path(bentoml.models.get(embedder_tag).path) / "onnx").is_dir()


@pytest.mark.slow_proof  # make test-slow-proofs: both trained models served side by side (a server start)
def test_the_trained_models_are_served_the_classifier_with_its_new_labels(classifier_tag, embedder_tag, logs):
    """Both trained models in one server (one start: the suite's time), each answering its own routes."""
    with running(classifier_tag, logs, "trained", TEXTBENTO_MODELS=f"{classifier_tag},{embedder_tag}") as server:
        answer = requests.post(f"{server.url}/v1/classify", json={"inputs": ["I was charged twice for my order"], "top_k": 5}, timeout=30)
        card = requests.get(f"{server.url}/v1/models", timeout=30).json()["data"][0]
        embedded = requests.post(f"{server.url}/v1/embeddings", json={"input": ["my parcel never arrived"]}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert card["labels"] == LABELS and card["task"] == "classify"
    (row,) = answer.json()["data"]
    assert {score["label"] for score in row["scores"]} == set(LABELS) and row["label"] in LABELS
    assert embedded.status_code == 200 and len(embedded.json()["data"][0]["embedding"]) == 384, embedded.text[:300]
    assert embedded.json()["model"] == embedder_tag.split(":")[0], embedded.json()["model"]
