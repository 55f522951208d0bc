"""Tokenization matches transformers' own, truncates at max_length and says so."""

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from api.pipeline import INLINE_CHARS, tokenize
from models.store import default_model_dir
from models.tokenization import TOKENS_CHUNK, TextTokenizer, TooManyTokens, utf8_offsets

TRANSFORMERS_5_TOKENIZER = Path(__file__).parent / "fixtures" / "transformers_5_tokenizer"


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


@pytest.mark.parametrize("model_dir", [default_model_dir(), TRANSFORMERS_5_TOKENIZER], ids=["wordpiece", "byte-level-bpe"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_a_shorter_limit_cuts_as_the_tokenizer_cut_to_it_would(model_dir, side):
    """``max_tokens`` below the model's limit: the ids a tokenizer made for that limit gives, special
    tokens kept (WordPiece's [CLS] and [SEP], a byte-level BPE's appended EOS)."""
    texts = ["a short one", "word " * 40, "déjà vu 🙂 42 " * 5]
    tokenizer = TextTokenizer(model_dir, max_length=64)
    for limit in (tokenizer.special_tokens + 1, 8, 63):
        reference = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
        reference.no_padding()
        reference.enable_truncation(limit, direction=side)
        shorter = tokenizer.encode(texts, side, max_tokens=limit)
        assert [e.ids.tolist() for e in shorter] == [e.ids for e in reference.encode_batch(texts)], limit
        assert [e.truncated for e in shorter] == [len(e.ids) > limit for e in tokenizer.encode(texts, side, max_tokens=None)], limit


def test_a_short_request_is_tokenized_on_the_event_loop_and_a_long_one_on_a_thread():
    """Up to ``INLINE_CHARS`` characters the hop to a thread costs more than the tokenizer; past them
    a request would hold the event loop, and every other request on it, while it is tokenized."""
    tokenizer = TextTokenizer(default_model_dir(), max_length=256)
    ran_on = []

    class Recording:
        def encode(self, texts, cut, max_tokens):
            ran_on.append(threading.current_thread())
            return tokenizer.encode(texts, cut, max_tokens)

    async def both():
        loop_thread = threading.current_thread()
        short = ["word " * (INLINE_CHARS // 10)] * 2
        long = [*short, "word"]
        for texts in (short, long):
            encoded = await tokenize(Recording(), texts, sum(map(len, texts)), "right", None)
            assert [e.ids.tolist() for e in encoded] == [e.ids.tolist() for e in tokenizer.encode(texts)]
        return loop_thread

    loop_thread = asyncio.run(both())
    assert ran_on[0] is loop_thread and ran_on[1] is not loop_thread


# /tokenize's listing: byte offsets into the text, as text-embeddings-inference gives them.
MIXED = "Déjà vu, naïve café: 日本語のテキスト and emoji 🙂🚀 — plain words too. "


def naive_byte_offsets(tokenizer: TextTokenizer, text: str) -> list[tuple[int, int] | None]:
    """The definition: a token's byte offsets are the UTF-8 lengths of the text before its first and past its last character."""
    encoding = tokenizer.cutting(None).encode(text)
    return [
        None if special else (len(text[:start].encode()), len(text[:stop].encode()))
        for (start, stop), special in zip(encoding.offsets, encoding.special_tokens_mask)
    ]


@pytest.mark.parametrize("text", ["", "plain ascii", MIXED, "🙂", "a\u07ffb\u0800c\U00010000d"])
def test_utf8_offsets_are_where_each_character_starts_in_the_bytes(text):
    assert utf8_offsets(text).tolist() == [len(text[:index].encode()) for index in range(len(text) + 1)]


@pytest.mark.parametrize("model_dir", [default_model_dir(), TRANSFORMERS_5_TOKENIZER], ids=["wordpiece", "byte-level-bpe"])
def test_tokenize_lists_byte_offsets_by_their_definition_on_a_long_text(model_dir):
    tokenizer = TextTokenizer(model_dir, max_length=64)
    text = (MIXED * (20_000 // len(MIXED) + 1))[:20_000]
    for one in (text, "ascii only, " * 50):
        (listed,) = tokenizer.tokens([one], add_special_tokens=True)
        assert [None if token.special else (token.start, token.stop) for token in listed] == naive_byte_offsets(tokenizer, one)
        assert all(token.special or token.text.encode() == one.encode()[token.start : token.stop] for token in listed)


def test_tokenize_takes_time_linear_in_a_texts_length():
    """Four times the text, about four times the time (a quadratic listing would take sixteen): the best of
    three timings each, held to a ratio, not to seconds."""
    tokenizer = TextTokenizer(default_model_dir(), max_length=64)
    text = MIXED * (25_000 // len(MIXED))

    def best_of_three(text: str) -> float:
        timings = []
        for _ in range(3):
            started = time.perf_counter()
            tokenizer.tokens([text], add_special_tokens=True)
            timings.append(time.perf_counter() - started)
        return min(timings)

    best_of_three(text)  # warm
    assert best_of_three(text * 4) / best_of_three(text) < 8


def test_tokenize_stops_at_its_token_limit_naming_the_input_that_passes_it():
    tokenizer = TextTokenizer(default_model_dir(), max_length=64)
    texts = ["word " * 100] * 40  # 102 tokens each, [CLS] and [SEP] included
    read = []
    backend = tokenizer.cutting(None)

    class Counting:
        def encode_batch(self, chunk, **options):
            read.extend(chunk)
            return backend.encode_batch(chunk, **options)

    tokenizer.cutting = lambda direction: Counting()
    with pytest.raises(TooManyTokens) as over:
        tokenizer.tokens(texts, add_special_tokens=True, max_tokens=1_000)
    assert (over.value.index, over.value.tokens, over.value.limit) == (9, 1_020, 1_000)
    assert len(read) == TOKENS_CHUNK  # what follows the chunk that passed the limit is never tokenized
    assert [len(tokens) for tokens in tokenizer.tokens(texts[:9], add_special_tokens=True, max_tokens=1_000)] == [102] * 9
