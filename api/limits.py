"""Request limits that answer 413 (too large): how many inputs (counted on the parsed body before its items
are validated: ``api/types.py``), each input's characters before any tokenization, and the size of answers
that grow with the tokens read (token vectors, sparse weights, ``/tokenize``'s tokens).

What counts against ``max_inputs`` is the list of texts a client sends: ``input``, ``inputs``, ``texts``,
a rerank's ``documents``, a similarity's ``sentences``. The query (or source sentence) beside such a list is
not counted, on every route, as text-embeddings-inference counts its ``max_client_batch_size``.
"""

from __future__ import annotations

from collections.abc import Sequence

from models.tokenization import Encoded, TextInput, TokenIds

from .errors import APIError


def check_count(count: int, param: str | None, max_inputs: int) -> None:
    """413 for a list of more than ``max_inputs`` inputs."""
    if count > max_inputs:
        raise APIError(413, "too_many_inputs", f"{count} inputs in one request; the limit is {max_inputs}", param)


def check_sizes(texts: Sequence[TextInput], param: str, max_inputs: int, max_chars: int, query_param: str | None = None) -> list[int]:
    """Each input's characters (a text's, or a pair's two); 413 for more than ``max_inputs`` inputs,
    or for an input over ``max_chars`` characters. With ``query_param``, the first text is the query
    beside the list ``param`` names: not counted, and named by ``query_param`` when too long."""
    check_count(len(texts) - (query_param is not None), param, max_inputs)
    sizes = [len(text) if isinstance(text, str | TokenIds) else sum(map(len, text)) for text in texts]
    longest = max(range(len(texts)), key=sizes.__getitem__)
    if sizes[longest] > max_chars:
        where, name = input_named(longest, param, query_param)
        raise APIError(413, "input_too_long", f"{where} has {sizes[longest]} characters; the limit is {max_chars}", name)
    return sizes


def input_named(index: int, param: str, query_param: str | None = None) -> tuple[str, str]:
    """The ``index``-th text of a request, as a message says it (``input 3``, ``the query``) and as ``param`` names it."""
    if query_param is None:
        return f"input {index}", f"{param}.{index}"
    return ("the query", query_param) if index == 0 else (f"input {index - 1}", f"{param}.{index - 1}")


def refuse_truncated(encoded: Sequence[Encoded], param: str, max_length: int, query_param: str | None = None) -> None:
    """413 naming the first text that did not fit in ``max_length`` tokens (when truncate is false)."""
    cut = next((index for index, e in enumerate(encoded) if e.truncated), None)
    if cut is not None:
        where, name = input_named(cut, param, query_param)
        raise APIError(413, "input_too_long", f"{where} is longer than {max_length} tokens and truncate is false", name)


def check_answer_size(values: int, what: str, param: str, max_values: int) -> None:
    """413 for an answer of more than ``max_values`` numbers (``what`` says how they add up): token
    vectors and sparse weights grow with the texts' tokens, past what ``max_inputs`` alone bounds."""
    if values > max_values:
        message = f"the answer would hold {values} values ({what}); the limit is {max_values}: send fewer or shorter texts"
        raise APIError(413, "answer_too_large", message, param)
