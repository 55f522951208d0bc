"""sentence-transformers pipelines served exactly as the library computes them.

Small random-weight pipelines built with sentence-transformers itself (every pooling mode, a Dense
module, Normalize), saved, imported through the store and run by the ONNX backend, against
``SentenceTransformer.encode`` on the same files; and the embedded all-MiniLM-L6-v2 served by
default against the library within the int8 gates.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer, models
from transformers import AutoTokenizer, BertConfig, BertModel

from models.store import default_model_dir, import_model
from tests.reference import backend_outputs
from tests.test_onnx import HARD_TEXTS, cosines

TEXTS = ["a short one", "ok", "The quick brown fox jumps over the lazy dog, twice.", *HARD_TEXTS[10:16]]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A small random-weight BERT with the embedded model's vocabulary."""
    directory = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir()))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    BertModel(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


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
