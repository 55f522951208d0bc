"""SPLADE (sentence-transformers SparseEncoder) served as the library encodes, and /embed_sparse in TEI's shape.

A tiny random-weight BertForMaskedLM with the embedded model's vocabulary, wrapped as MLMTransformer +
SpladePooling and saved by sentence-transformers itself, imported through the store and held to
``SparseEncoder.encode`` (dense rows) on the torch backend and the fp32 ONNX graph, then served for real.
"""

from __future__ import annotations

import json
from pathlib import Path

import bentoml
import numpy as np
import pytest
import requests
from sentence_transformers import SparseEncoder
from transformers import BertForMaskedLM

from harness.testmodels import build_splade, build_tiny_bert
from models.backends import load_backend, self_checked
from models.detection import UnsupportedModel
from models.selfcheck import MAX_FLIPPED_MASS, MEAN_COSINE, MIN_COSINE
from models.spec import ModelSpec
from models.store import import_model
from tests.conftest import running
from tests.reference import backend_outputs, damaged_int8
from tests.test_selfcheck import drop_small_weights

TEXTS = ["a short one", "ok", "The quick brown fox jumps over the lazy dog, twice.", "Émojis 🙂 and déjà vu, naïve café."]


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory) -> Path:
    """A small random-weight BertForMaskedLM with the embedded model's vocabulary (30,522 ids)."""
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-mlm"), BertForMaskedLM)


def splade(tiny_mlm: Path, directory: Path, pooling: str = "max", activation: str = "relu") -> SparseEncoder:
    return build_splade(directory, tiny_mlm, pooling, activation)


def library_rows(model: SparseEncoder, texts: list[str]) -> np.ndarray:
    return model.encode(texts, convert_to_sparse_tensor=False, convert_to_tensor=True).cpu().numpy()


@pytest.mark.parametrize("pooling, activation", [("max", "relu"), ("sum", "log1p_relu")])
def test_a_splade_model_is_served_as_the_library_encodes(tiny_mlm, tmp_path, pooling, activation):
    model = splade(tiny_mlm, tmp_path / "splade", pooling, activation)
    tag = str(import_model(tmp_path / "splade", name=f"splade-{pooling}"))
    spec = ModelSpec.of(bentoml.models.get(tag))
    assert (spec.task, spec.dimensions, spec.max_length, spec.sparse_pooling, spec.sparse_activation) == (
        "sparse",
        30522,
        64,
        pooling,
        activation,
    )
    expected = library_rows(model, TEXTS)
    assert (expected > 0).sum(axis=1).min() > 0 and (expected > 0).sum(axis=1).max() < expected.shape[1]  # sparse, not empty
    for backend in ("torch", "onnx"):
        rows = backend_outputs(tag, backend, TEXTS)
        assert rows.shape == expected.shape
        assert np.abs(rows - expected).max() <= 1e-5, (backend, np.abs(rows - expected).max())


def test_the_graph_pools_inside_so_only_rows_of_the_vocabulary_leave_it(tiny_mlm, tmp_path):
    import onnx

    splade(tiny_mlm, tmp_path / "splade")
    stored = bentoml.models.get(import_model(tmp_path / "splade", name="splade-graph"))
    (output,) = onnx.load(str(Path(stored.path) / "onnx" / "model.onnx"), load_external_data=False).graph.output
    dims = [dim.dim_param or dim.dim_value for dim in output.type.tensor_type.shape.dim]
    assert (output.name, dims) == ("sparse_embedding", ["batch", 30522])


@pytest.mark.int8
def test_the_int8_graph_is_a_candidate_only_through_the_flip_gate(tiny_mlm, tmp_path):
    """The stored int8 graph passes here; one that also drops the small weights holding 1% of each
    text's L1 mass stays within the cosine gates, which is why sparse models have a gate of their own."""
    splade(tiny_mlm, tmp_path / "splade")
    stored = bentoml.models.get(import_model(tmp_path / "splade", name="splade-auto"))
    spec = ModelSpec.of(stored)
    _, (int8, *_), _ = self_checked(stored.path, spec, 2)
    assert (int8.name, int8.fidelity.passed) == ("onnx-int8", True), int8.fidelity
    assert int8.fidelity.max_flipped_mass <= MAX_FLIPPED_MASS

    with damaged_int8(lambda rows: drop_small_weights(rows, 0.01)):
        _, (int8, *_), _ = self_checked(stored.path, spec, 2)
        assert (int8.name, int8.fidelity.passed) == ("onnx-int8", False), int8.fidelity
        assert int8.fidelity.min_cosine >= MIN_COSINE and int8.fidelity.mean_cosine >= MEAN_COSINE
        assert int8.fidelity.max_flipped_mass > MAX_FLIPPED_MASS
        assert load_backend("auto", stored.path, spec, 2).name != "onnx-int8"


def rewrite_modules(directory: Path, modules: list[dict]) -> None:
    (directory / "modules.json").write_text(json.dumps(modules))


@pytest.mark.parametrize(
    "modules, refused",
    [
        (  # inference-free SPLADE: a Router with a SparseStaticEmbedding for queries
            [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Router"}],
            r"'0' \(sentence_transformers.models.Router\) are not reproduced",
        ),
        (
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder.models.SparseStaticEmbedding"},
                {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": "sentence_transformers.sparse_encoder.models.SpladePooling"},
            ],
            "SparseStaticEmbedding",
        ),
        (  # CSR: a dense embedder with a SparseAutoEncoder on top
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_CSR", "type": "sentence_transformers.sparse_encoder.models.SparseAutoEncoder"},
            ],
            "SparseAutoEncoder",
        ),
    ],
)
def test_a_sparse_encoder_textbento_does_not_reproduce_is_refused_by_name(tiny_mlm, tmp_path, modules, refused):
    splade(tiny_mlm, tmp_path / "splade")
    rewrite_modules(tmp_path / "splade", modules)
    with pytest.raises(UnsupportedModel, match=refused):
        import_model(tmp_path / "splade", name="refused", onnx=False)
    assert not [model for model in bentoml.models.list() if model.tag.name == "refused"]


def test_the_task_override_stays_coherent(tiny_mlm, tmp_path):
    splade(tiny_mlm, tmp_path / "splade")
    with pytest.raises(UnsupportedModel, match="import it with --task sparse"):
        import_model(tmp_path / "splade", name="as-embed", task="embed", onnx=False)
    with pytest.raises(UnsupportedModel, match="--task sparse needs a sentence-transformers SparseEncoder"):
        import_model(tiny_mlm, name="mlm-as-sparse", task="sparse", onnx=False)
    assert ModelSpec.of(bentoml.models.get(import_model(tmp_path / "splade", name="as-sparse", task="sparse", onnx=False))).task == "sparse"


def test_embed_sparse_served_for_real_in_teis_shape(tiny_mlm, tmp_path, logs):
    model = splade(tiny_mlm, tmp_path / "splade")
    tag = str(import_model(tmp_path / "splade", name="splade-served"))
    expected = library_rows(model, TEXTS)
    with running(tag, logs, "sparse", TEXTBENTO_WORKERS="1", TEXTBENTO_BACKEND="onnx") as server:
        answer = requests.post(f"{server.url}/embed_sparse", json={"inputs": TEXTS}, timeout=60)
        one = requests.post(f"{server.url}/embed_sparse", json={"inputs": TEXTS[0]}, timeout=60)
        wrong = requests.post(f"{server.url}/v1/embeddings", json={"input": "dense please"}, timeout=60)
        no_prompt = requests.post(f"{server.url}/embed_sparse", json={"inputs": "x", "prompt_name": "no-such-prompt"}, timeout=60)
    assert answer.status_code == one.status_code == 200, (answer.text[:300], one.text[:300])
    vectors = answer.json()
    assert len(vectors) == len(TEXTS) and len(one.json()) == 1  # a string is one text
    for entries, row in zip([*vectors, *one.json()], [*expected, expected[0]]):
        assert set(entries[0]) == {"index", "value"}
        indices = [entry["index"] for entry in entries]
        assert indices == sorted(set(indices)) and all(entry["value"] != 0 for entry in entries)  # ascending, non-zero only
        answered = np.zeros_like(row)
        answered[indices] = [entry["value"] for entry in entries]
        # The library's non-zero ids, values within 1e-5 (a weight within 1e-5 of zero may be zero on one side only).
        assert np.abs(answered - row).max() <= 1e-5 and len(indices) >= 0.9 * np.count_nonzero(row)
    # /embed_sparse is TEI's route: TEI's error shape, which its clients read.
    assert no_prompt.status_code == 400 and no_prompt.json()["error_type"] == "Validation" and "prompt_name" in no_prompt.text
    assert wrong.status_code == 400 and wrong.json()["error"]["type"] == "wrong_task", wrong.text
    assert "does 'embed'" in wrong.json()["error"]["message"] and "does 'sparse'" in wrong.json()["error"]["message"], wrong.text
    # a dense model asked for sparse vectors: tests/test_service.py
