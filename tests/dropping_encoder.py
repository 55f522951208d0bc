"""service.py served with a fault (tests only): the Encoder's server drops the connection of every
``TEXTBENTO_TEST_DROP_EVERY``-th call to ``/encode`` as its request arrives, before any answer.

``bentoml serve tests.dropping_encoder:TextBento`` imports this module in every process, the
Encoder's included; only the Encoder has an ``/encode`` route, so only its calls are dropped.
"""

import itertools
import logging
import os

from uvicorn.protocols.http import h11_impl, httptools_impl

from service import Encoder, TextBento  # noqa: F401 - the services under test

EVERY = int(os.environ["TEXTBENTO_TEST_DROP_EVERY"])
calls = itertools.count(1)
logger = logging.getLogger("textbento")


def dropping(data_received):
    def receive(protocol, data: bytes) -> None:
        if data.startswith(b"POST /encode") and next(calls) % EVERY == 0:
            logger.warning("test fault: connection dropped as a call arrived")
            protocol.transport.abort()
            return
        data_received(protocol, data)

    return receive


for protocol in (httptools_impl.HttpToolsProtocol, h11_impl.H11Protocol):
    protocol.data_received = dropping(protocol.data_received)
