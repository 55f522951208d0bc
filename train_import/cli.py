"""What both command lines do with their one action: print the new tag, or one line on stderr."""

from __future__ import annotations

import sys
from typing import Callable

import bentoml


def report(verb: str, action: Callable[[], bentoml.Tag], failures: tuple[type[Exception], ...]) -> int:
    """Runs ``action``; prints its tag and returns 0, or prints ``<verb> failed: <reason>`` and returns 1."""
    try:
        tag = action()
    except failures as error:
        print(f"{verb} failed: {error}", file=sys.stderr)
        return 1
    print(tag)
    return 0
