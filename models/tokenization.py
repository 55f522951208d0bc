"""Text → token ids with the model's fast (Rust) tokenizer, truncated to the model's limit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Literal

import numpy as np
from tokenizers import Encoding, Tokenizer

from .batching import unattended, with_segments
from .spec import ModelSpec


class TokenIds(tuple):
    """An input given as token ids in the model's own vocabulary: read as they are, not tokenized."""


# One text, or a pair (query, passage) tokenized together as a cross-encoder reads it, or token ids.
TextInput = str | tuple[str, str] | TokenIds


@dataclass(frozen=True)
class Encoded:
    """One input as the Encoder sees it: its token ids (special tokens included; a pair's second text
    with its token type folded in, ``models.batching.with_segments``) and whether it was cut."""

    ids: np.ndarray
    truncated: bool

    @property
    def tokens(self) -> int:
        return len(self.ids)


class TextTokenizer:
    """Encodes batches of texts without padding; padding is the batcher's job, per sub-batch.

    Loads ``tokenizer.json`` with the ``tokenizers`` library alone: importing transformers would
    import torch and cost every API worker ~300 MiB for nothing. The Rust tokenizer also reports
    truncation (``overflowing``) without a second pass.
    """

    def __init__(self, model_dir: str | Path, max_length: int) -> None:
        self.path = str(Path(model_dir) / "tokenizer.json")
        self.max_length = max_length
        self._backend = self.cutting("right")

    # One tokenizer per way of cutting: truncation is a setting of the tokenizer, not of a call, and
    # one instance is shared by the threads of every request. The left and uncut ones are rare: made when first asked for.
    @cache  # noqa: B019 (one per TextTokenizer, as long-lived as it)
    def cutting(self, direction: Literal["right", "left"] | None) -> Tokenizer:
        """The tokenizer that cuts texts past ``max_length`` on that side (``None``: never)."""
        backend = Tokenizer.from_file(self.path)
        backend.no_padding()
        if direction is None:
            backend.no_truncation()
        else:
            backend.enable_truncation(self.max_length, direction=direction)
        return backend

    @property
    def special_tokens(self) -> int:
        """How many special tokens the tokenizer adds to a single text."""
        return self._backend.num_special_tokens_to_add(False)

    def encode(self, texts: Sequence[TextInput], cut: Literal["right", "left"] = "right", max_tokens: int | None = None) -> list[Encoded]:
        """Texts and pairs alike; a pair is truncated longest text first, as transformers does.
        ``max_tokens`` below the model's limit cuts single texts shorter (special tokens included).
        ``TokenIds`` are taken as they are (the caller has checked them)."""
        if given := {i: Encoded(np.asarray(one, dtype=np.int32), False) for i, one in enumerate(texts) if isinstance(one, TokenIds)}:
            tokenized = iter(self.encode([one for one in texts if not isinstance(one, TokenIds)], cut, max_tokens))
            return [given[i] if i in given else next(tokenized) for i in range(len(texts))]
        if not texts:
            return []
        if max_tokens is not None and max_tokens < self.max_length:
            return self.encode_shorter(texts, cut, max_tokens)
        encoded = []
        for text, encoding in zip(texts, self.cutting(cut).encode_batch(list(texts))):
            ids = np.asarray(encoding.ids, dtype=np.int32)
            if isinstance(text, tuple):
                ids = with_segments(ids, np.asarray(encoding.type_ids, dtype=np.int32))
            encoded.append(Encoded(ids, bool(encoding.overflowing)))
        return encoded

    def encode_pairs_cut(
        self, pairs: Sequence[tuple[str, str]], second_tokens: int, cut: Literal["right", "left"] = "right"
    ) -> list[Encoded]:
        """Pairs whose second text is first cut to its first ``second_tokens`` tokens (its own, special tokens
        aside; its last ones with ``cut`` left), then read as ``encode`` reads a pair (cut to the model's limit)."""
        parts = self.cutting(None)
        firsts = parts.encode_batch([first for first, _ in pairs], add_special_tokens=False)
        seconds = parts.encode_batch([second for _, second in pairs], add_special_tokens=False)
        encoded = []
        for first, second in zip(firsts, seconds):
            shortened = len(second.ids) > second_tokens
            second.truncate(second_tokens, direction=cut)
            pair = self.cutting(cut).post_process(first, second)
            ids = with_segments(np.asarray(pair.ids, dtype=np.int32), np.asarray(pair.type_ids, dtype=np.int32))
            encoded.append(Encoded(ids, shortened or bool(pair.overflowing)))
        return encoded

    def encode_shorter(self, texts: Sequence[TextInput], cut: Literal["right", "left"], max_tokens: int) -> list[Encoded]:
        """Single texts in at most ``max_tokens``: cut as the Rust tokenizer cuts (the text's own
        tokens first, then its special tokens added), with no tokenizer made per limit."""
        if any(isinstance(text, tuple) for text in texts):
            raise ValueError("a token limit below the model's applies to single texts only")
        backend = self.cutting(None)
        room = max(max_tokens - self.special_tokens, 0)
        encoded = []
        for encoding in backend.encode_batch(list(texts), add_special_tokens=False):
            truncated = len(encoding.ids) > room
            encoding.truncate(room, direction=cut)
            encoded.append(Encoded(np.asarray(backend.post_process(encoding).ids, dtype=np.int32), truncated))
        return encoded

    @cached_property
    def framing(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The special token ids the tokenizer puts before and after every single text (BERT's ``[CLS]`` and ``[SEP]``)."""
        content = self._backend.encode("a", add_special_tokens=False).ids
        framed = self._backend.encode("a").ids
        start = next(i for i in range(len(framed)) if framed[i : i + len(content)] == content)
        return tuple(framed[:start]), tuple(framed[start + len(content) :])

    @property
    def vocabulary_size(self) -> int:
        """How many token ids the model reads (added tokens included): ids run from 0 to one less."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    def decode(self, ids: Sequence[Sequence[int]], skip_special_tokens: bool) -> list[str]:
        """Each list of token ids back to text, as ``tokenizers`` decodes it."""
        return self._backend.decode_batch([list(one) for one in ids], skip_special_tokens=skip_special_tokens)

    def tokens(self, texts: Sequence[str], add_special_tokens: bool, max_tokens: int | None = None) -> list[list[Token]]:
        """Each text's tokens as text-embeddings-inference's ``/tokenize`` lists them: uncut, with
        byte offsets into the text; a special token has its own text and no offsets. Past ``max_tokens``
        in all, ``TooManyTokens``: texts are read ``TOKENS_CHUNK`` at a time, so that no more than that
        chunk is ever tokenized past the limit, and no token of a refused request becomes an object."""
        encodings, counted = [], 0
        for first in range(0, len(texts), TOKENS_CHUNK):
            chunk = list(texts[first : first + TOKENS_CHUNK])
            for index, encoding in enumerate(self.cutting(None).encode_batch(chunk, add_special_tokens=add_special_tokens), first):
                counted += len(encoding.ids)
                if max_tokens is not None and counted > max_tokens:
                    raise TooManyTokens(index, counted, max_tokens)
                encodings.append(encoding)
        return [listed_tokens(text, encoding) for text, encoding in zip(texts, encodings)]


# /tokenize's texts are tokenized this many at a time (parallel within a chunk, in the Rust tokenizer).
TOKENS_CHUNK = 16


class TooManyTokens(Exception):
    """More tokens than a caller's limit: the input at which the count passed it."""

    def __init__(self, index: int, tokens: int, limit: int) -> None:
        super().__init__(f"{tokens} tokens up to input {index}; the limit is {limit}")
        self.index, self.tokens, self.limit = index, tokens, limit


def listed_tokens(text: str, encoding: Encoding) -> list[Token]:
    """``encoding``'s tokens of ``text``, each with its UTF-8 byte offsets (the tokenizer's count characters)."""
    byte_at = None if text.isascii() else utf8_offsets(text).tolist()  # in ASCII, characters and bytes agree
    tokens = []
    for id_, (start, stop), special, token in zip(encoding.ids, encoding.offsets, encoding.special_tokens_mask, encoding.tokens):
        if special:
            tokens.append(Token(id_, token, True, None, None))
        elif byte_at is None:
            tokens.append(Token(id_, text[start:stop], False, start, stop))
        else:
            tokens.append(Token(id_, text[start:stop], False, byte_at[start], byte_at[stop]))
    return tokens


def utf8_offsets(text: str) -> np.ndarray:
    """Where each character of ``text`` starts in its UTF-8 encoding, and where the text ends (``len(text) + 1``
    entries): one pass over the text, so that each token's byte offsets are a lookup, not a re-encoding of the
    text before it."""
    code_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    widths = 1 + (code_points >= 0x80).astype(np.int64) + (code_points >= 0x800) + (code_points >= 0x10000)
    return np.concatenate(([0], np.cumsum(widths)))


Side = Literal["query", "document"]


class SideTokenizer:
    """A multi-vector (ColBERT) model's queries or documents as PyLate tokenizes them: the text stripped,
    cut to the side's length less the prefix, the prefix token put after the first token, and a query
    padded with expansion tokens up to its length (marked unattended where the model does not attend to
    them: ``models.batching.unattended``).
    """

    def __init__(self, model_dir: str | Path, spec: ModelSpec, side: Side) -> None:
        self.side = side
        self.prefix_id = spec.query_prefix_id if side == "query" else spec.document_prefix_id
        self.max_length = spec.query_length if side == "query" else spec.max_length
        self.texts = TextTokenizer(model_dir, self.max_length - (self.prefix_id is not None))
        self.expansion = None
        if side == "query" and spec.expansion_id is not None:
            expansion = np.asarray([spec.expansion_id], dtype=np.int32)
            self.expansion = expansion if spec.attend_to_expansion else unattended(expansion)

    def encode(
        self, texts: Sequence[str], cut: Literal["right", "left"] = "right", max_tokens: int | None = None, own_tokens: int | None = None
    ) -> list[Encoded]:
        """With ``own_tokens``, each text cut to that many of its own tokens (special tokens and the prefix aside) first."""
        if max_tokens is not None:
            raise ValueError("a multi-vector model's texts are cut to its query or document length only")
        limit = None if own_tokens is None else own_tokens + self.texts.special_tokens
        encoded = []
        for text in self.texts.encode([text.strip() for text in texts], cut, limit):
            ids = text.ids if self.prefix_id is None else np.insert(text.ids, 1, self.prefix_id)
            if self.expansion is not None and len(ids) < self.max_length:
                ids = np.concatenate([ids, np.repeat(self.expansion, self.max_length - len(ids))])
            encoded.append(Encoded(ids, text.truncated))
        return encoded


class QueryAndDocuments:
    """A rerank's texts in one call: the first as a query, the others as documents (each cut to
    ``document_tokens`` of its own tokens first, where given)."""

    def __init__(self, sides: dict[Side, SideTokenizer], document_tokens: int | None = None) -> None:
        self.query, self.document = sides["query"], sides["document"]
        self.max_length = self.document.max_length
        self.document_tokens = document_tokens

    def encode(self, texts: Sequence[str], cut: Literal["right", "left"] = "right", max_tokens: int | None = None) -> list[Encoded]:
        return self.query.encode(texts[:1], cut, max_tokens) + self.document.encode(texts[1:], cut, max_tokens, self.document_tokens)


class PairsCut:
    """A cross-encoder's pairs, each pair's second text cut to ``second_tokens`` of its own tokens first
    (``TextTokenizer.encode_pairs_cut``)."""

    def __init__(self, tokenizer: TextTokenizer, second_tokens: int) -> None:
        self.tokenizer, self.second_tokens = tokenizer, second_tokens
        self.max_length = tokenizer.max_length

    def encode(
        self, pairs: Sequence[tuple[str, str]], cut: Literal["right", "left"] = "right", max_tokens: int | None = None
    ) -> list[Encoded]:
        if max_tokens is not None:
            raise ValueError("a pair is cut to the model's limit only")
        return self.tokenizer.encode_pairs_cut(pairs, self.second_tokens, cut)


@dataclass(frozen=True)
class Token:
    """One token of ``/tokenize``: its id, its text, whether it is special, and where it lies in the input (UTF-8 bytes)."""

    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None
