"""serving.drain: SIGTERM reaches the server's handler only once no batch has run for a while and no caller is connected."""

from __future__ import annotations

import os
import signal
import threading
import time

from serving.drain import Drain


def test_sigterm_waits_for_the_batches_then_a_quiet_spell():
    stopped = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())  # the server's own handler
    try:
        drain = Drain(quiet_s=0.3, longest_s=10)
        drain.postpone_sigterm()
        with drain.batch():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)  # a second one changes nothing
            assert not stopped.wait(0.5)  # a batch runs: the server keeps serving
        ended = time.monotonic()
        assert stopped.wait(5)
        assert time.monotonic() - ended >= 0.25
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_waits_while_a_caller_stays_connected_after_the_quiet_spell():
    stopped, callers = threading.Event(), [1]
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    try:
        drain = Drain(quiet_s=0.1, longest_s=10, callers=lambda: callers[0], callers_quiet_s=2.0)
        drain.postpone_sigterm()
        os.kill(os.getpid(), signal.SIGTERM)
        assert not stopped.wait(0.6)  # quiet, but an API worker still holds its connection: it may have work left
        callers[0] = 0  # the worker exited
        assert stopped.wait(5)
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_waits_for_connected_callers_only_while_they_stay_quiet_less_than_callers_quiet_s():
    stopped = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    try:
        drain = Drain(quiet_s=0.1, longest_s=60, callers=lambda: 1, callers_quiet_s=1.0)
        drain.postpone_sigterm()
        os.kill(os.getpid(), signal.SIGTERM)
        assert not stopped.wait(0.5)
        assert stopped.wait(5)  # a caller connected but silent this long: not waited for until longest_s
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_is_not_postponed_past_the_longest_wait():
    stopped = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    try:
        drain = Drain(quiet_s=60, longest_s=0.3)
        drain.postpone_sigterm()
        with drain.batch():
            os.kill(os.getpid(), signal.SIGTERM)
            assert stopped.wait(5)
    finally:
        signal.signal(signal.SIGTERM, previous)
