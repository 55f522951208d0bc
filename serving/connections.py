"""Each service's connection limits, and what its servers hold now.

The deadlines themselves are a patch of uvicorn (``serving/compat/uvicorn_connections.py``: headers,
body and an idle keep-alive per service); ``limit_connections`` gives them this service's values.
Each open connection holds a file descriptor, and container runtimes differ in the soft limit they
give (1,024 under some): ``raise_open_files_limit`` lifts it to the hard limit, as Go's runtime does.
"""

from __future__ import annotations

import resource

from .compat.uvicorn_connections import LIMITS, applied
from .socket_hop import HELD


def open_connections() -> int:
    """Connections this process's servers hold now, HTTP and the socket hop's (``textbento_held``)."""
    return LIMITS.open + HELD.connections


def limit_connections(*, header_timeout_s: float, body_timeout_s: float, keep_alive_s: float) -> None:
    """Applies to every connection this process's uvicorn accepts from now on, and raises its open-files limit."""
    if not applied():
        raise RuntimeError("uvicorn's protocol is not patched: call serving.compat.apply() first")
    raise_open_files_limit()
    LIMITS.header_timeout_s, LIMITS.body_timeout_s, LIMITS.keep_alive_s = header_timeout_s, body_timeout_s, keep_alive_s


def raise_open_files_limit() -> int:
    """Sets this process's soft limit on open files to its hard limit; returns the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 2**20  # the kernel refuses an infinite soft limit
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target
