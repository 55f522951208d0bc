"""Keeps the Encoder answering until its callers have drained, when the service is told to stop.

SIGTERM reaches every process of ``bentoml serve`` at once (a container stop, ``kill`` of the
process group, the arbiter stopping its workers). Each API worker then finishes the requests it
accepted, and for that it still needs the Encoder; but the Encoder's uvicorn stops taking calls
on the same signal and BentoML cancels the calls waiting in its batcher: accepted requests would
be answered 503 at shutdown (docs/design.md 7). So the Encoder postpones its own exit until its callers
are done, and never by more than ``longest_s``: until it has run no batch for ``quiet_s`` and no caller
holds a connection to it. A quiet spell alone is not proof: an API worker on a starved CPU can still be
reading or tokenizing an accepted request a second after its last call. Its keep-alive connection to
the Encoder stays open until it exits (or idles out after ``ENCODER_KEEP_ALIVE_S``); the spell covers a
worker that has not reconnected yet. A worker's exit can be held up by something that needs no Encoder
(a request held open by BentoML's timeout middleware once did: ``serving/compat/bentoml_requests.py``),
so after ``callers_quiet_s`` with no batch the Encoder leaves though callers are still connected.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Drain:
    """Counts the batches in progress; ``postpone_sigterm`` defers the process's SIGTERM handler while they, or callers, last."""

    def __init__(self, quiet_s: float, longest_s: float, callers: Callable[[], int] = lambda: 0, callers_quiet_s: float = 10.0) -> None:
        self.quiet_s, self.callers_quiet_s = quiet_s, callers_quiet_s
        self.longest_s = longest_s
        self.callers = callers  # connections open to this process's server now
        self.in_progress = 0
        self.last_active = time.monotonic()
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    @contextmanager
    def batch(self) -> Iterator[None]:
        with self.lock:
            self.in_progress += 1
        try:
            yield
        finally:
            with self.lock:
                self.in_progress -= 1
                self.last_active = time.monotonic()

    def idle_for(self) -> float:
        """Seconds since the last batch ended; 0 while one runs."""
        with self.lock:
            return 0.0 if self.in_progress else time.monotonic() - self.last_active

    def callers_done(self) -> bool:
        idle_s = self.idle_for()
        return (idle_s >= self.quiet_s and not self.callers()) or idle_s >= self.callers_quiet_s

    def postpone_sigterm(self) -> None:
        """Installs the deferring handler; call from the main thread after the server installed its own."""
        server_handler = signal.getsignal(signal.SIGTERM)
        if not callable(server_handler) or threading.current_thread() is not threading.main_thread():
            return  # not under a server that handles SIGTERM (a test, a notebook): nothing to defer

        def deferred(signum: int, frame) -> None:
            if self.stopping.is_set():
                return  # a second SIGTERM (the arbiter after a group kill): the first one is waited on
            self.stopping.set()
            threading.Thread(target=self.then_stop, args=(server_handler, signum, frame), daemon=True).start()

        signal.signal(signal.SIGTERM, deferred)

    def then_stop(self, server_handler, signum: int, frame) -> None:
        deadline = time.monotonic() + self.longest_s
        while not self.callers_done() and time.monotonic() < deadline:
            time.sleep(0.05)
        server_handler(signum, frame)
