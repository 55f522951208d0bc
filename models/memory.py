"""The C heap's memory handed back to the system, where glibc would keep it as the process's own.

``release_freed_memory``, once after the self-check: the free pages its graphs left (DistilBERT's fp32
reference: 480 MiB of resident memory for nothing, docs/design.md 19); and in an API worker once a request
with a body of ``LARGE`` or more is answered (``api/middleware.ReadBodyFirst``, docs/reliability.md).

``return_large_buffers``, in the API workers. glibc's malloc gives a block over its mmap threshold (128 KiB
at first) a mapping of its own and unmaps it when freed; but each such free raises the threshold to that
block's size (up to 32 MiB), so that later blocks as large come from the heap, which keeps up to twice the
threshold of freed memory before it trims. An API worker that has read a large upload or written a large
answer then holds tens of MiB it no longer uses, more after each larger one: without this, an API worker
ended the disconnect storm (SPLADE answers among the others) 18.4% above its level before it (``make
storm``, docs/reliability.md). A threshold fixed at ``LARGE`` stays there: a block that large always gets a
mapping of its own and goes back to the system when freed, while the request path's buffers (a 32-text
embedding answer is about 150 KB) stay under it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from typing import Any

logger = logging.getLogger("textbento")
M_MMAP_THRESHOLD = -3  # glibc's malloc.h; setting it also ends the threshold's rises
LARGE = 1 << 20


@functools.cache
def c_function(name: str) -> Any:
    """The C library's function ``name``; None where there is none (musl has no ``malloc_trim``, macOS neither)."""
    libc = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(libc), name, None) if libc else None


def return_large_buffers() -> bool:
    """This process's blocks of ``LARGE`` bytes or more mapped on their own and unmapped when freed
    (glibc's ``mallopt``); False where the C library has no such setting (musl, macOS)."""
    mallopt = c_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, LARGE) == 1:
        return True
    logger.info("the C library kept its mmap threshold: freed large buffers may stay with this process")
    return False


def release_freed_memory() -> None:
    """The heap's free pages handed back to the system (glibc's ``malloc_trim``); elsewhere (musl, macOS) nothing."""
    trim = c_function("malloc_trim")
    if trim is not None:
        trim(0)
