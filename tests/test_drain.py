"""serving.drain: SIGTERM reaches the server's handler only once no batch has run for a while and no caller is connected."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from serving.drain import Drain


@contextmanager
def server_handler() -> Iterator[threading.Event]:
    """A stand-in for the server's own SIGTERM handler, for the test's length: set when SIGTERM reaches it."""
    stopped = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_waits_for_the_batches_then_a_quiet_spell():
    with server_handler() as stopped:
        drain = Drain(quiet_s=0.3, longest_s=10)
        drain.postpone_sigterm()
        with drain.batch():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)  # a second one changes nothing
            assert not stopped.wait(0.5)  # a batch runs: the server keeps serving
        ended = time.monotonic()
        assert stopped.wait(5)
        assert time.monotonic() - ended >= 0.25


def test_sigterm_waits_while_a_caller_stays_connected_after_the_quiet_spell():
    callers = [1]
    with server_handler() as stopped:
        drain = Drain(quiet_s=0.1, longest_s=10, callers=lambda: callers[0], callers_quiet_s=2.0)
        drain.postpone_sigterm()
        os.kill(os.getpid(), signal.SIGTERM)
        assert not stopped.wait(0.6)  # quiet, but an API worker still holds its connection: it may have work left
        callers[0] = 0  # the worker exited
        assert stopped.wait(5)


def test_sigterm_waits_for_connected_callers_only_while_they_stay_quiet_less_than_callers_quiet_s():
    with server_handler() as stopped:
        drain = Drain(quiet_s=0.1, longest_s=60, callers=lambda: 1, callers_quiet_s=1.0)
        drain.postpone_sigterm()
        os.kill(os.getpid(), signal.SIGTERM)
        assert not stopped.wait(0.5)
        assert stopped.wait(5)  # a caller connected but silent this long: not waited for until longest_s


def test_sigterm_is_not_postponed_past_the_longest_wait():
    with server_handler() as stopped:
        drain = Drain(quiet_s=60, longest_s=0.3)
        drain.postpone_sigterm()
        with drain.batch():
            os.kill(os.getpid(), signal.SIGTERM)
            assert stopped.wait(5)
