"""BentoML's supervisor, corrected in place: it removes the services' Unix sockets as it starts to stop,
and it replaces a dead process only at its next periodic check.

``bentoml serve`` runs its processes under a circus arbiter, and SIGTERM reaches the arbiter with
the rest. circus stops the watchers (each waits for its processes to exit), then closes the
sockets. BentoML's ``Arbiter.stop`` first empties its exit stack, though, and that removes the
directory of the services' Unix sockets at once. The Encoder still answers its callers while it
drains (``serving/drain.py``), but only on the connections already open: an API worker that needs
one more after the signal (every pooled one busy) finds no socket file, and its requests get 503
(3 of 17 in a run of the SIGTERM test). Here the exit stack is emptied after circus has closed the
sockets, once every watcher has stopped.

BentoML's arbiter checks its processes every 10 s (circus's ``check_delay``, which BentoML raises from 1 s
lest the check collide with its watchers' start), and circus does not handle SIGCHLD: a killed Encoder
(out of memory on one text, say) is replaced 0-10 s after it dies, every request to its model waiting
meanwhile. Here the arbiter runs that check as soon as a child exits, up to ``AT_ONCE`` times in
``AT_ONCE_WITHIN_S``; a process that keeps dying as it starts is left to the periodic check after that,
so a crash loop costs no more CPU than under BentoML's check alone.
"""

from __future__ import annotations

import inspect
import logging
import signal
import time
from collections import deque

from bentoml._internal.utils.circus import Arbiter
from circus.arbiter import Arbiter as CircusArbiter
from circus.sighandler import SysHandler

STOCK_STOP = Arbiter.stop  # BentoML's own: the exit stack first, then circus's stop
STOCK_INITIALIZE = Arbiter.initialize
EXIT_FIRST = "self.exit_stack.__exit__(None, None, None)"
AT_ONCE, AT_ONCE_WITHIN_S = 3, 60.0
RETRY_S = 0.1
logger = logging.getLogger("textbento")


def apply() -> None:
    """BentoML's arbiter keeps its services' sockets until its watchers have stopped, from now on (twice changes nothing)."""
    if Arbiter.stop is _stop:
        return
    if EXIT_FIRST not in inspect.getsource(STOCK_STOP) or "stop_controller_and_close_sockets" in Arbiter.__dict__:
        raise RuntimeError("BentoML's arbiter changed how it stops: serving/compat/bentoml_arbiter.py no longer applies")
    if "initialize" in Arbiter.__dict__ or signal.SIGCHLD in SysHandler.SIGNALS or not callable(getattr(Arbiter, "manage_watchers", None)):
        raise RuntimeError("BentoML's arbiter changed how it watches its processes: serving/compat/bentoml_arbiter.py no longer applies")
    Arbiter.stop = _stop
    Arbiter.stop_controller_and_close_sockets = _close_sockets_then_exit
    Arbiter.initialize = _initialize


def _stop(self: Arbiter):
    """circus's own stop: the watchers, then the sockets (``_close_sockets_then_exit``)."""
    return CircusArbiter.stop(self)


def _close_sockets_then_exit(self: Arbiter) -> None:
    CircusArbiter.stop_controller_and_close_sockets(self)
    self.exit_stack.__exit__(None, None, None)


def _initialize(self: Arbiter) -> None:
    """circus's own, then a check of the processes whenever a child exits (in the main thread only, where
    signals are handled: an arbiter in a thread of its own keeps the periodic check alone)."""
    STOCK_INITIALIZE(self)
    self.replaced_at_once = deque(maxlen=AT_ONCE)
    try:
        self.loop.asyncio_loop.add_signal_handler(signal.SIGCHLD, _replace_the_dead, self)
    except (RuntimeError, ValueError) as error:
        logger.debug("dead processes replaced at the periodic check only: %s", error)


def _replace_the_dead(self: Arbiter) -> None:
    """The periodic check, run now: it reaps the dead and starts their replacements. Not while the arbiter
    stops or restarts, nor past ``AT_ONCE`` a window; while it runs another command, a little later."""
    now = time.monotonic()
    if self._stopping or self._restarting:
        return
    if self._exclusive_running_command is not None:
        self.loop.call_later(RETRY_S, _replace_the_dead, self)
        return
    if len(self.replaced_at_once) == AT_ONCE and now - self.replaced_at_once[0] < AT_ONCE_WITHIN_S:
        return
    self.replaced_at_once.append(now)
    self.loop.add_future(self.manage_watchers(), lambda checked: checked.result())  # a failure is logged by the loop
