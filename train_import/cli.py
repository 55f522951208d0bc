"""What both command lines do with their one action: print the new tag, or one line on stderr."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

import bentoml


def report(verb: str, action: Callable[[], bentoml.Tag], failures: tuple[type[Exception], ...]) -> int:
    """Runs ``action``; prints its tag and returns 0, or prints ``<verb> failed: <reason>`` and returns 1.

    Its long steps (loading, saving, exporting, quantizing) are shown on stderr as they start.
    """
    show_progress()
    try:
        tag = action()
    except failures as error:
        print(f"{verb} failed: {error}", file=sys.stderr)
        return 1
    print(tag)
    return 0


def show_progress() -> None:
    started = time.monotonic()

    class Elapsed(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return f"[{time.monotonic() - started:6.1f} s] {record.getMessage()}"

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Elapsed())
    progress = logging.getLogger("textbento.import")
    progress.handlers[:] = [handler]
    progress.setLevel(logging.INFO)
    progress.propagate = False
