"""sentence-transformers pipelines served exactly as the library computes them.

Small random-weight pipelines built with sentence-transformers itself (every pooling mode, a Dense
module, Normalize), saved, imported through the store and run by the ONNX backend, against
``SentenceTransformer.encode`` on the same files, also with the files as sentence-transformers 6
writes them; and the embedded all-MiniLM-L6-v2 served by
default against the library within the int8 gates.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import bentoml
import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer, models

from harness.testmodels import build_tiny_bert
from models.detection import UnsupportedModel, read_sentence_transformers
from models.spec import ModelSpec
from models.store import default_model_dir, import_model
from tests.reference import backend_outputs
from tests.test_onnx import HARD_TEXTS, cosines

TEXTS = ["a short one", "ok", "The quick brown fox jumps over the lazy dog, twice.", *HARD_TEXTS[10:16]]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A small random-weight BERT with the embedded model's vocabulary."""
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def pipeline(tiny_bert, directory, pooling: str, dense: bool) -> SentenceTransformer:
    modules = [models.Transformer(str(tiny_bert), max_seq_length=64), models.Pooling(32, pooling_mode=pooling)]
    if dense:
        torch.manual_seed(1)
        modules.append(models.Dense(32, 16, activation_function=torch.nn.Tanh()))
    model = SentenceTransformer(modules=[*modules, models.Normalize()], device="cpu")
    model.save(str(directory))
    return model


@pytest.mark.parametrize(
    "pooling, dense",
    [
        ("mean", False),
        ("cls", False),
        ("max", False),
        ("mean_sqrt_len_tokens", False),
        ("weightedmean", False),
        ("lasttoken", False),
        ("cls", True),
    ],
)
def test_a_pipeline_is_served_as_the_library_encodes(tiny_bert, tmp_path, pooling, dense):
    model = pipeline(tiny_bert, tmp_path / "st", pooling, dense)
    tag = str(import_model(tmp_path / "st", name=f"st-{pooling.replace('_', '-')}{'-dense' if dense else ''}"))
    expected = model.encode(TEXTS, convert_to_numpy=True)
    for backend in ("onnx", "torch"):
        served = backend_outputs(tag, backend, TEXTS)
        assert served.shape == expected.shape == (len(TEXTS), 16 if dense else 32)
        assert np.abs(served - expected).max() <= 1e-5, (backend, np.abs(served - expected).max())


def test_the_default_model_stays_within_the_gates_of_the_library(embed_tag):
    expected = SentenceTransformer(str(default_model_dir()), device="cpu").encode(HARD_TEXTS, convert_to_numpy=True)
    assert np.abs(backend_outputs(embed_tag, "onnx", HARD_TEXTS) - expected).max() <= 1e-5
    assert cosines(backend_outputs(embed_tag, "auto", HARD_TEXTS), expected).min() >= 0.99


FIXTURES = Path(__file__).parent / "fixtures"


def as_written_by(directory: Path, major: int) -> None:
    """The configuration files of ``directory`` replaced by those sentence-transformers ``major``.x wrote
    for the same pipeline (``fixtures/make_sentence_transformers.py``). 6.x: modules by new class
    paths, pooling by name, ``module_input_name`` on Dense and Normalize, the length limit in the
    tokenizer; 5.x: pooling by flags, and no configuration for Normalize."""
    written = FIXTURES / f"sentence_transformers_{major}"
    for stale in directory.glob("[0-9]_*/config.json"):
        if not (written / stale.relative_to(directory)).is_file():
            stale.unlink()
    for path in written.rglob("*.json"):
        shutil.copy(path, directory / path.relative_to(written))


@pytest.mark.parametrize("major", [5, 6])
def test_a_pipeline_saved_by_sentence_transformers_5_or_6_is_served_as_the_library_encodes(tiny_bert, tmp_path, major):
    model = pipeline(tiny_bert, tmp_path / "st", "cls", dense=True)
    as_written_by(tmp_path / "st", major)
    written_by = json.loads((tmp_path / "st" / "config_sentence_transformers.json").read_text())["__version__"]
    assert written_by["sentence_transformers"].startswith(f"{major}.")
    tag = import_model(tmp_path / "st", name=f"st{major}-cls-dense")
    spec = ModelSpec.of(bentoml.models.get(tag))
    assert (spec.pooling, spec.dense, spec.normalize, spec.dimensions, spec.max_length) == ("cls", ("tanh",), True, 16, 64)
    expected = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert np.abs(expected - model.encode(TEXTS, convert_to_numpy=True)).max() <= 1e-6  # the library reads both alike
    for backend in ("onnx", "torch"):
        assert np.abs(backend_outputs(str(tag), backend, TEXTS) - expected).max() <= 1e-5, backend


@pytest.mark.parametrize(
    "file, change, refused",
    [
        ("1_Pooling/config.json", {"pooling_mode": ["cls", "mean"]}, "pooling cls \\+ mean"),
        ("1_Pooling/config.json", {"pooling_mode": "attention"}, "pooling attention"),
        ("2_Dense/config.json", {"module_input_name": "token_embeddings"}, "module_input_name 'token_embeddings'"),
        ("3_Normalize/config.json", {"module_output_name": "token_embeddings"}, "module_output_name 'token_embeddings'"),
        ("sentence_bert_config.json", {"transformer_task": "fill-mask"}, "transformer_task 'fill-mask'"),
    ],
)
def test_what_sentence_transformers_6_computes_differently_is_refused_by_name(tiny_bert, tmp_path, file, change, refused):
    pipeline(tiny_bert, tmp_path / "st", "cls", dense=True)
    as_written_by(tmp_path / "st", 6)
    config = json.loads((tmp_path / "st" / file).read_text())
    (tmp_path / "st" / file).write_text(json.dumps({**config, **change}))
    with pytest.raises(UnsupportedModel, match=refused):
        read_sentence_transformers(tmp_path / "st")
