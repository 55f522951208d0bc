"""Compact int8/uint8 embeddings on ranges stored with the model (``models.calibration``): the
arithmetic of sentence-transformers' ``quantize_embeddings`` with ``ranges=``, a text's bytes
independent of its batch mates, and values past the ranges clipped rather than wrapped."""

import numpy as np
import pytest
from sentence_transformers.util.quantization import quantize_embeddings

from models.calibration import built_in_texts, quantized, ranges_of
from models.selfcheck import PROBE_TEXTS
from models.store import default_model_dir


@pytest.mark.parametrize("kind", ["int8", "uint8"])
def test_quantized_as_sentence_transformers_within_the_ranges_and_clipped_past_them(kind):
    rng = np.random.default_rng(0)
    calibration = rng.normal(0, 0.1, (512, 48)).astype(np.float32)
    ranges = ranges_of(calibration)
    texts = calibration[:64]
    assert np.array_equal(quantized(texts, kind, ranges), quantize_embeddings(texts, kind, ranges=ranges))
    alone = np.stack([quantized(row[None], kind, ranges)[0] for row in texts])
    assert np.array_equal(alone, quantized(texts, kind, ranges))  # no batch mates in the arithmetic
    past = np.stack([ranges[0] - 1.0, ranges[1] + 1.0])
    low, high = np.iinfo(np.dtype(kind)).min, np.iinfo(np.dtype(kind)).max
    assert (quantized(past, kind, ranges)[0] == low).all() and (quantized(past, kind, ranges)[1] == high).all()


def test_built_in_texts_come_from_the_vocabulary_the_same_each_time():
    texts = built_in_texts(default_model_dir())
    assert len(texts) == 512 and texts[: len(PROBE_TEXTS)] == list(PROBE_TEXTS)
    assert texts == built_in_texts(default_model_dir()) and len(set(texts)) == 512
    assert not any("##" in text for text in texts)
