"""A custom-code model (its architecture in Python files beside its weights, ``auto_map``, as nomic-embed,
jina-embeddings and gte ship theirs): its code runs at import only, with ``--trust-remote-code``, to export
the ONNX graphs; the server serves the graphs, matches transformers running the code, and never imports it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import bentoml
import numpy as np
import pytest
import requests
import torch

from harness.testmodels import build_custom_code_encoder
from models.backends import load_backend
from models.detection import UnsupportedModel, custom_code
from models.inference import run_batch
from models.spec import ModelSpec
from models.tokenization import TextTokenizer
from tests.conftest import run_import, running

TEXTS = ["hello world", "Déjà vu, the quick brown fox jumps over the lazy dog", "ok", "SELECT * FROM t WHERE x = 1;"]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return build_custom_code_encoder(tmp_path_factory.mktemp("custom-code") / "rotary")


@pytest.fixture(scope="module")
def imported(source, tmp_path_factory):
    """The model imported with --trust-remote-code; the file its code notes each process that imports it in."""
    marker = tmp_path_factory.mktemp("marker") / "imported-by"
    os.environ["TEXTBENTO_TEST_CODE_MARKER"] = str(marker)  # the import and the server inherit it
    try:
        result = run_import("--path", str(source), "--name", "rotary", "--trust-remote-code")
    finally:
        del os.environ["TEXTBENTO_TEST_CODE_MARKER"]
    assert result.returncode == 0, result.stderr
    return result.stdout.strip(), marker


def expected(source, built: bool = False) -> np.ndarray:
    """transformers running the model's code (``built``: the model built by its own code, given the loaded
    weights): mean pooling over the real tokens, unit length."""
    from transformers import AutoModel, AutoTokenizer

    from models.export import built_by_its_code

    tokenizer = AutoTokenizer.from_pretrained(str(source), trust_remote_code=True)
    model = AutoModel.from_pretrained(str(source), trust_remote_code=True).eval()
    model = built_by_its_code(model) if built else model
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()


def test_without_trust_remote_code_the_import_is_refused_naming_the_flag_and_the_files(source):
    result = run_import("--path", str(source), "--name", "rotary-untrusted")
    assert result.returncode == 1 and "--trust-remote-code" in result.stderr, result.stderr
    assert "configuration_rotary.py, modeling_rotary.py" in result.stderr and "never runs the code" in result.stderr


def test_the_import_runs_the_code_and_records_it(imported, source):
    tag, marker = imported
    assert marker.read_text().split(), "the import ran the model's code"
    stored = bentoml.models.get(tag)
    recorded = stored.info.metadata["custom_code"]["files"]
    assert recorded == custom_code(source) and set(recorded) == {"configuration_rotary.py", "modeling_rotary.py"}
    assert stored.info.metadata["onnx"] and json.loads((Path(stored.path) / "config.json").read_text())["auto_map"]


def test_served_from_its_graphs_as_transformers_runs_its_code_and_the_server_never_imports_it(imported, source, logs):
    tag, marker = imported
    marker.unlink(missing_ok=True)
    with running(tag, logs, "custom-code", TEXTBENTO_BACKEND="onnx", TEXTBENTO_TEST_CODE_MARKER=str(marker)) as server:
        answer = requests.post(f"{server.url}/v1/embeddings", json={"input": TEXTS}, timeout=60)
        assert answer.status_code == 200, answer.text
        served = np.array([item["embedding"] for item in answer.json()["data"]])
        default = requests.post(f"{server.url}/v1/embeddings", json={"input": TEXTS, "model": "rotary"}, timeout=60)
        assert default.status_code == 200, default.text
    assert np.abs(served - expected(source)).max() <= 1e-5
    assert not marker.exists(), f"processes that imported the model's code while serving: {marker.read_text()}"


def test_the_torch_backend_refuses_the_code_unless_told_to_run_it(imported, source):
    from models.backends.torch_backend import TorchBackend

    stored = bentoml.models.get(imported[0])
    with pytest.raises(UnsupportedModel, match="TEXTBENTO_TRUST_REMOTE_CODE=1"):
        TorchBackend(stored.path, ModelSpec.of(stored), threads=1)
    trusted = TorchBackend(stored.path, ModelSpec.of(stored), threads=1, trust_remote_code=True)
    assert trusted.forward(np.array([[101, 7592, 102]], dtype=np.int32), np.ones((1, 3), dtype=np.int64)).shape == (1, 64)


def test_code_in_another_repository_is_custom_code_too(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "org/code-repo--modeling_x.XModel"}}))
    assert list(custom_code(tmp_path)) == ["org/code-repo--modeling_x.XModel"]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert custom_code(tmp_path) == {}


def test_alibi_in_a_buffer_transformers_leaves_uninitialised_is_exported_as_its_code_builds_it(tmp_path):
    """ALiBi's biases kept as jina-bert-v2 keeps them, a non-persistent buffer for the longest length sliced to each
    batch's: transformers 5 leaves such a buffer uninitialised on load (the loaded model computes from stale memory);
    the graph is traced from the model as its own code builds it, with the loaded weights, and slices the table by
    each pass's length."""
    source = build_custom_code_encoder(tmp_path / "alibi", position_scheme="alibi")
    result = run_import("--path", str(source), "--name", "alibi", "--trust-remote-code")
    assert result.returncode == 0, result.stderr
    stored = bentoml.models.get(result.stdout.strip())  # its fp32 graph, in process (served as the test above serves one)
    spec = ModelSpec.of(stored)
    backend = load_backend("onnx", stored.path, spec, threads=1)
    ids = [encoded.ids for encoded in TextTokenizer(stored.path, spec.max_length).encode(TEXTS)]
    graph = np.stack(run_batch(backend, ids, spec.pad_id, token_budget=2048))
    assert np.abs(graph - expected(source, built=True)).max() <= 1e-5
    alone = np.stack([run_batch(backend, [one], spec.pad_id, token_budget=2048)[0] for one in ids])  # other lengths, other slices
    assert np.abs(alone - graph).max() <= 1e-5
