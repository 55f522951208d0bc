"""BentoML's supervisor removing the services' Unix sockets as it starts to stop, corrected in place.

``bentoml serve`` runs its processes under a circus arbiter, and SIGTERM reaches the arbiter with
the rest. circus stops the watchers (each waits for its processes to exit), then closes the
sockets. BentoML's ``Arbiter.stop`` first empties its exit stack, though, and that removes the
directory of the services' Unix sockets at once. The Encoder still answers its callers while it
drains (``serving/drain.py``), but only on the connections already open: an API worker that needs
one more after the signal (every pooled one busy) finds no socket file, and its requests get 503
(3 of 17 in a run of the SIGTERM test). Here the exit stack is emptied after circus has closed the
sockets, once every watcher has stopped.
"""

from __future__ import annotations

import inspect

from bentoml._internal.utils.circus import Arbiter
from circus.arbiter import Arbiter as CircusArbiter

STOCK_STOP = Arbiter.stop  # BentoML's own: the exit stack first, then circus's stop
EXIT_FIRST = "self.exit_stack.__exit__(None, None, None)"


def apply() -> None:
    """BentoML's arbiter keeps its services' sockets until its watchers have stopped, from now on (twice changes nothing)."""
    if Arbiter.stop is _stop:
        return
    if EXIT_FIRST not in inspect.getsource(STOCK_STOP) or "stop_controller_and_close_sockets" in Arbiter.__dict__:
        raise RuntimeError("BentoML's arbiter changed how it stops: serving/compat/bentoml_arbiter.py no longer applies")
    Arbiter.stop = _stop
    Arbiter.stop_controller_and_close_sockets = _close_sockets_then_exit


def _stop(self: Arbiter):
    """circus's own stop: the watchers, then the sockets (``_close_sockets_then_exit``)."""
    return CircusArbiter.stop(self)


def _close_sockets_then_exit(self: Arbiter) -> None:
    CircusArbiter.stop_controller_and_close_sockets(self)
    self.exit_stack.__exit__(None, None, None)
