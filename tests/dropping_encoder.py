"""service.py served with a fault (tests only): the Encoder's server drops the connection of every
``TEXTBENTO_TEST_DROP_EVERY``-th call to ``/encode``: as its request arrives, before any answer, or
with ``TEXTBENTO_TEST_DROP_AT=answer`` halfway through the answer's body (an Encoder dying as it answers).

``bentoml serve tests.dropping_encoder:TextBento`` imports this module in every process, the
Encoder's included; only the Encoder has an ``/encode`` route, so only its calls are dropped.
"""

import itertools
import logging
import os

from uvicorn.protocols.http import h11_impl, httptools_impl

from service import Encoder, TextBento  # noqa: F401 - the services under test

EVERY = int(os.environ["TEXTBENTO_TEST_DROP_EVERY"])
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
        if data.startswith(b"POST /encode") and next(calls) % EVERY == 0:
            if AT_ANSWER:
                logger.warning("test fault: connection dropped halfway through an answer")
                cut_midway(protocol.transport)
            else:
                logger.warning("test fault: connection dropped as a call arrived")
                protocol.transport.abort()
                return
        data_received(protocol, data)

    return receive


for protocol in (httptools_impl.HttpToolsProtocol, h11_impl.H11Protocol):
    protocol.data_received = dropping(protocol.data_received)
