"""Tokenization matches transformers' own, truncates at max_length and says so."""

import numpy as np
from transformers import AutoTokenizer

from models.store import default_model_dir
from models.tokenization import TextTokenizer


def test_matches_transformers_and_reports_truncation():
    tokenizer = TextTokenizer(default_model_dir(), max_length=16)
    reference = AutoTokenizer.from_pretrained(str(default_model_dir()))
    texts = ["a short one", "word " * 40]
    encoded = tokenizer.encode(texts)
    expected = reference(texts, truncation=True, max_length=16)["input_ids"]
    assert [e.ids.tolist() for e in encoded] == expected
    assert [e.truncated for e in encoded] == [False, True]
    assert [e.tokens for e in encoded] == [len(ids) for ids in expected]
    assert encoded[1].tokens == 16 and encoded[0].ids.dtype == np.int32


def test_exactly_max_length_is_not_truncated():
    tokenizer = TextTokenizer(default_model_dir(), max_length=6)
    (encoded,) = tokenizer.encode(["one two three four"])  # [CLS] + 4 words + [SEP]
    assert encoded.tokens == 6 and not encoded.truncated
