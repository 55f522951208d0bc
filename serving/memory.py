"""Large buffers handed back to the system when freed, in the API workers.

glibc's malloc gives a block over its mmap threshold (128 KiB at first) a mapping of its own and unmaps
it when freed; but each such free raises the threshold to that block's size (up to 32 MiB), so that
later blocks as large come from the heap, which keeps up to twice the threshold of freed memory before
it trims. An API worker that has read a large upload or written a large answer then holds tens of MiB
it no longer uses, more after each larger one: without this, an API worker ended the disconnect storm
(SPLADE answers among the others) 18.4% above its level before it (``make storm``, docs/reliability.md). A
threshold fixed at ``LARGE`` stays there: a block that large always gets a mapping of its own and goes
back to the system when freed, while the request path's buffers (a 32-text embedding answer is about
150 KB) stay under it.
"""

from __future__ import annotations

import ctypes
import logging

logger = logging.getLogger("textbento")
M_MMAP_THRESHOLD = -3  # glibc's malloc.h; setting it also ends the threshold's rises
LARGE = 1 << 20


def return_large_buffers() -> bool:
    """This process's blocks of ``LARGE`` bytes or more mapped on their own and unmapped when freed
    (glibc's ``mallopt``); False where the C library has no such setting (musl, macOS)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, LARGE) == 1:
        return True
    logger.info("the C library kept its mmap threshold: freed large buffers may stay with this process")
    return False
