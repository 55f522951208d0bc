"""service.py served with a fault (tests only): the Encoder's server drops the connection of every
``TEXTBENTO_TEST_DROP_EVERY``-th call to ``/encode`` (served with ``TEXTBENTO_ENCODER_HOP=http``): as
its request arrives, before any answer, or with ``TEXTBENTO_TEST_DROP_AT=answer`` halfway through the
answer's body (an Encoder dying as it answers).
With ``TEXTBENTO_TEST_POISON_ID``, the Encoder kills its own process (SIGKILL, as the kernel's OOM
killer would) when a pass holds a text with that token id: a text that kills every Encoder it meets;
with ``TEXTBENTO_TEST_SLOW_ID``, a pass holding that id takes a second longer (a call held out while
the next requests arrive, to merge).

``bentoml serve tests.dropping_encoder:TextBento`` imports this module in every process, the
Encoder's included; only the Encoder has an ``/encode`` route, so only its calls are dropped.
"""

import itertools
import logging
import os
import signal
import time

from uvicorn.protocols.http import h11_impl, httptools_impl

from models.engine import Engine
from service import Encoder, TextBento  # noqa: F401 - the services under test

EVERY = int(os.environ.get("TEXTBENTO_TEST_DROP_EVERY", "0"))
POISON = int(os.environ.get("TEXTBENTO_TEST_POISON_ID", "-1"))
SLOW = int(os.environ.get("TEXTBENTO_TEST_SLOW_ID", "-1"))
AT_ANSWER = os.environ.get("TEXTBENTO_TEST_DROP_AT", "request") == "answer"
calls = itertools.count(1)
logger = logging.getLogger("textbento")


def cut_midway(transport) -> None:
    """From now on the connection writes its answer's headers and half its body, then drops."""
    write, written = transport.write, bytearray()

    def half(data: bytes) -> None:
        written.extend(data)
        head_end = written.find(b"\r\n\r\n")
        if head_end < 0 or len(written) == head_end + 4:  # the headers alone so far: wait for the body
            return
        write(bytes(written[: head_end + 4 + (len(written) - head_end - 4) // 2]))
        transport.abort()

    transport.write = half


def dropping(data_received):
    def receive(protocol, data: bytes) -> None:
        if EVERY and data.startswith(b"POST /encode") and next(calls) % EVERY == 0:
            if AT_ANSWER:
                logger.warning("test fault: connection dropped halfway through an answer")
                cut_midway(protocol.transport)
            else:
                logger.warning("test fault: connection dropped as a call arrived")
                protocol.transport.abort()
                return
        data_received(protocol, data)

    return receive


def poisoned(forward):
    def computing(self, token_ids, *args, **kwargs):
        if any((ids == POISON).any() for ids in token_ids):
            logger.warning("test fault: the Encoder dies computing a poisoned text")
            os.kill(os.getpid(), signal.SIGKILL)
        if any((ids == SLOW).any() for ids in token_ids):
            time.sleep(1)
        return forward(self, token_ids, *args, **kwargs)

    return computing


for protocol in (httptools_impl.HttpToolsProtocol, h11_impl.H11Protocol):
    protocol.data_received = dropping(protocol.data_received)
if POISON >= 0:
    Engine.forward = poisoned(Engine.forward)
