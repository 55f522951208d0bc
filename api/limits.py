"""Request limits that answer 413 (too large), checked before any tokenization or inference."""

from __future__ import annotations

from collections.abc import Sequence

from models.tokenization import Encoded, TextInput

from .errors import APIError


def check_sizes(texts: Sequence[TextInput], param: str, max_inputs: int, max_chars: int) -> list[int]:
    """Each input's characters (a text's, or a pair's two); 413 for more than ``max_inputs`` inputs,
    or for an input over ``max_chars`` characters."""
    if len(texts) > max_inputs:
        raise APIError(413, "too_many_inputs", f"{len(texts)} inputs in one request; the limit is {max_inputs}", param)
    sizes = [len(text) if isinstance(text, str) else sum(map(len, text)) for text in texts]
    longest = max(range(len(texts)), key=sizes.__getitem__)
    if sizes[longest] > max_chars:
        raise APIError(
            413, "input_too_long", f"input {longest} has {sizes[longest]} characters; the limit is {max_chars}", f"{param}.{longest}"
        )
    return sizes


def refuse_truncated(encoded: Sequence[Encoded], param: str, max_length: int) -> None:
    """413 naming the first text that did not fit in ``max_length`` tokens (when truncate is false)."""
    cut = next((index for index, e in enumerate(encoded) if e.truncated), None)
    if cut is not None:
        raise APIError(413, "input_too_long", f"input {cut} is longer than {max_length} tokens and truncate is false", f"{param}.{cut}")
