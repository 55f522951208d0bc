"""Faults under load: a killed runner or worker is replaced, disconnects leave nothing behind, SIGTERM drains;
a text that kills the Encoder fails alone (serving/hop.py), and the per-text cap that keeps long texts from doing so is served."""

import asyncio
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import numpy as np
import psutil
import pytest
import requests
from transformers import AutoTokenizer, Qwen3Config

from harness.load import closed_loop
from harness.serving import role, service_processes
from harness.testmodels import build_decoder, build_decoder_tokenizer
from models.store import import_model
from reliability.storm import gauges, idle_levels, settled
from serving.coalesce import Coalescer, ItemFailed
from serving.hop import LoneCalls, resend_unanswered, unsent
from tests.conftest import eventually_ok, running
from tests.test_coalesce import settle

POISON = 13
WRITE_FAILED = aiohttp.ClientOSError(errno.EPIPE, "Can not write request body for http://127.0.0.1:3000/encode")


class FlakyEncoder:
    """An Encoder stand-in: doubles its items; dies (``died``) on any call carrying ``POISON``, and fails
    to receive the first ``unwritten`` calls. Records each call, and the most lone calls out at once."""

    def __init__(self, died: Exception = aiohttp.ServerDisconnectedError(), unwritten: int = 0) -> None:
        self.died, self.unwritten = died, unwritten
        self.calls: list[list[int]] = []
        self.out = self.most_out_alone = 0

    async def __call__(self, items: list[int]) -> list:
        self.calls.append(items)
        self.out += 1
        self.most_out_alone = max(self.most_out_alone, self.out) if len(items) == 1 else self.most_out_alone
        try:
            await asyncio.sleep(0.01)
            if len(self.calls) <= self.unwritten:
                raise WRITE_FAILED
            if POISON in items:
                raise self.died
            return [2 * item for item in items]
        finally:
            self.out -= 1


def test_what_the_encoder_never_read_is_told_from_what_it_died_computing():
    assert unsent(WRITE_FAILED) and unsent(aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer"))
    assert unsent(aiohttp.ClientConnectionResetError("Cannot write to closing transport"))
    assert unsent(aiohttp.ClientOSError(None, "Can not write request body for http://127.0.0.1:3000/encode"))
    assert not unsent(aiohttp.ServerDisconnectedError()) and not unsent(aiohttp.ClientPayloadError("Response payload is not completed"))


def test_a_call_the_encoder_never_read_is_sent_again_whole():
    encoder = FlakyEncoder(unwritten=2)
    assert asyncio.run(resend_unanswered(encoder, attempts=3)([1, 2, 3])) == [2, 4, 6]
    assert encoder.calls == [[1, 2, 3]] * 3


@pytest.mark.parametrize("died", [aiohttp.ServerDisconnectedError(), aiohttp.ClientPayloadError("cut short")], ids=["dropped", "cut"])
def test_a_text_that_kills_the_encoder_fails_alone_and_the_requests_merged_with_it_are_answered(tmp_path, died):
    """Three requests share a call with a poison text, which kills the Encoder: the call is not sent again
    whole; each text goes alone, one at a time, once. The poison kills it once more, alone, and only its
    request fails, told which of its texts; before, the call went three times and every request failed."""

    async def scenario():
        encoder = FlakyEncoder(died)
        coalescer = Coalescer(resend_unanswered(encoder, attempts=3, lone=LoneCalls("test", str(tmp_path))), max_items=8, in_flight=1)
        first = asyncio.create_task(coalescer.submit([0]))
        await settle()
        merged = [asyncio.create_task(coalescer.submit(items)) for items in ([1, 2], [3, POISON], [4])]
        assert await first == [0]
        answers = await asyncio.gather(*merged, return_exceptions=True)
        return encoder, answers

    encoder, answers = asyncio.run(scenario())
    assert answers[0] == [2, 4] and answers[2] == [8]
    assert isinstance(answers[1], ItemFailed) and answers[1].index == 1, answers[1]
    assert encoder.calls == [[0], [1, 2, 3, POISON, 4], [1], [2], [3], [POISON], [4]]
    assert encoder.most_out_alone == 1


def test_with_one_attempt_nothing_is_sent_again():
    encoder = FlakyEncoder()
    with pytest.raises(aiohttp.ServerDisconnectedError):
        asyncio.run(resend_unanswered(encoder, attempts=1)([1, POISON]))
    assert encoder.calls == [[1, POISON]]


def test_lone_calls_wait_for_each_other_across_workers(tmp_path):
    """Two workers' locks (two opens of one file, as two processes hold): the second waits for the first."""

    async def scenario():
        order = []

        async def lone(name: str, hold_s: float) -> None:
            async with LoneCalls("model", str(tmp_path)).held():
                order.append(f"{name} in")
                await asyncio.sleep(hold_s)
                order.append(f"{name} out")

        first = asyncio.create_task(lone("first", 0.1))
        await asyncio.sleep(0.02)
        await asyncio.gather(first, lone("second", 0))
        return order

    assert asyncio.run(scenario()) == ["first in", "first out", "second in", "second out"]


def load_while(url, action, *, after_s=3, deadline_s=15, concurrency=16):
    """Closed-loop load on ``url``; ``action()`` runs ``after_s`` into it. Returns the load result."""
    outcome = {}
    thread = threading.Thread(
        target=lambda: outcome.update(
            result=asyncio.run(
                closed_loop(
                    f"{url}/v1/embeddings",
                    lambda i: {"input": f"text {i} " * 10},
                    concurrency=concurrency,
                    requests=10**6,
                    deadline_s=deadline_s,
                )
            )
        )
    )
    thread.start()
    time.sleep(after_s)
    action()
    thread.join()
    return outcome["result"]


@pytest.fixture(scope="module")
def fault_server(embed_tag, logs):
    with running(embed_tag, logs, "faults") as server:
        yield server


def test_killed_runner_is_replaced_and_no_request_is_lost(fault_server):
    """The calls in flight lose their connection before any answer, so their texts are sent again alone
    (serving/hop.py) and wait in the Encoder's socket backlog, which the arbiter keeps open, until
    the new Encoder answers them: 200 a few seconds late, not 503. Small calls leave the Encoder idle
    between them, so one long request is sent just before the kill: a third of its time alone, it is
    in the Encoder, and its texts come back as it was answered before."""
    url = f"{fault_server.url}/v1/embeddings"
    long_request = {"input": [f"{i} " + "the quick brown fox jumps over the lazy dog " * 30 for i in range(64)]}
    started = time.monotonic()
    before = requests.post(url, json=long_request, timeout=120)
    alone_s = time.monotonic() - started
    after = {}

    def kill_during_the_long_request():
        sending = threading.Thread(target=lambda: after.update(response=requests.post(url, json=long_request, timeout=120)))
        sending.start()
        time.sleep(alone_s / 3)
        runner.send_signal(signal.SIGKILL)
        sending.join()

    (runner,) = service_processes(fault_server.process, "encoder")
    result = load_while(fault_server.url, kill_during_the_long_request)
    print("\nrunner killed:", result.summary(), f"(the long request: {alone_s:.2f} s alone)")
    assert set(result.statuses) == {200}, result.sample_errors
    assert "sending it again, each text alone" in fault_server.log.read_text()
    assert after["response"].status_code == 200, after["response"].text
    expected, answered = (np.array([row["embedding"] for row in r.json()["data"]]) for r in (before, after["response"]))
    assert np.einsum("ij,ij->i", expected, answered).min() > 0.99  # unit vectors; int8 rows differ a little by batch
    assert eventually_ok(fault_server.url, within_s=90)
    assert [p.pid for p in service_processes(fault_server.process, "encoder")] != [runner.pid]


def test_killed_api_worker_is_replaced(fault_server):
    victim = service_processes(fault_server.process, "textbento")[0]
    result = load_while(fault_server.url, lambda: victim.send_signal(signal.SIGKILL))
    print("\nAPI worker killed:", result.summary())
    # Requests on the killed process's own connections can only see the connection drop;
    # none may get a 5xx, and the other worker keeps answering.
    assert not {s for s in result.statuses if isinstance(s, int) and s >= 500}, result.sample_errors
    assert result.statuses[200] > 0
    assert eventually_ok(fault_server.url, within_s=90)
    deadline = time.monotonic() + 60
    while len(service_processes(fault_server.process, "textbento")) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert victim.pid not in [p.pid for p in service_processes(fault_server.process, "textbento")]


@pytest.mark.parametrize(
    ("where", "attempts"),
    [
        # make test-slow-proofs: the resend of calls dropped as they arrive; "cut-answer-sent-again" proves it of calls dropped later
        pytest.param("request", 3, id="sent-again", marks=pytest.mark.slow_proof),
        pytest.param("request", 1, id="sent-once"),
        pytest.param("answer", 3, id="cut-answer-sent-again"),
    ],
)
def test_calls_dropped_before_an_answer_are_sent_again_text_by_text(embed_tag, logs, where, attempts):
    """The Encoder's server drops every 7th call's connection as the call arrives, or halfway through
    its answer (tests/dropping_encoder.py): from the API worker, an Encoder dying as it computes or
    answers. Such a call's texts are sent again alone (the default 3 attempts); a text whose lone call
    is a 7th call too looks like one that kills the Encoder, and only its request fails (500
    ``model_failed``): 12 and 11 of 300 in one run, every other request 200. Sent once
    (``TEXTBENTO_ENCODER_ATTEMPTS=1``), every request in a dropped call is lost (503). The calls go by
    HTTP, whose server drops them; the socket hop's faults: tests/test_socket_hop.py."""
    env = {"TEXTBENTO_TEST_DROP_EVERY": "7", "TEXTBENTO_TEST_DROP_AT": where, "TEXTBENTO_ENCODER_ATTEMPTS": str(attempts)}
    env["TEXTBENTO_ENCODER_HOP"] = "http"
    with running(embed_tag, logs, f"drop-{where}-{attempts}", target="tests.dropping_encoder:TextBento", **env) as server:
        body = lambda i: {"input": [f"text {i} {j}" for j in range(1 + i % 4)]}
        result = asyncio.run(closed_loop(f"{server.url}/v1/embeddings", body, concurrency=8, requests=300, deadline_s=90))
        log = server.log.read_text()
    print(f"\n{where}, {attempts} attempt(s):", result.summary())
    assert log.count("test fault: connection dropped") >= 5
    if attempts > 1:
        assert set(result.statuses) <= {200, 500} and result.statuses[200] >= 0.85 * 300, result.summary()
        assert result.statuses[500] <= log.count("the Encoder stopped again computing one text alone"), result.summary()
        assert all("model_failed" in error for error in result.sample_errors), result.sample_errors
        assert log.count("sending it again, each text alone") >= 5
    else:
        assert result.statuses[503] > 0 and set(result.statuses) == {200, 503}, result.sample_errors
        assert all("runner_unavailable" in error for error in result.sample_errors)


def test_client_disconnects_leave_nothing_stuck(embed_url):
    """Whatever the shared server served before: every stage back to its idle level within seconds.
    The idle level is read after one answer: BentoML starts the Encoder's batch dispatcher, a task
    that lives as long as the process, on its first call."""
    assert eventually_ok(embed_url, within_s=30)
    time.sleep(1.5)  # textbento_held is sampled each second
    idle = idle_levels(embed_url)

    async def impatient():
        timeout = aiohttp.ClientTimeout(total=0.02)
        async with aiohttp.ClientSession(timeout=timeout) as session:

            async def one(i):
                try:
                    async with session.post(f"{embed_url}/v1/embeddings", json={"input": [f"text {i} {j}" for j in range(32)]}):
                        pass
                except TimeoutError:
                    return

            await asyncio.gather(*(one(i) for i in range(64)))

    asyncio.run(impatient())
    time.sleep(1.5)
    settle_s, still = settled(embed_url, idle, within_s=10)
    print(f"\n64 requests of 32 texts given up after 20 ms: every stage at its idle level {settle_s} s after 1.5 s")
    assert settle_s is not None, f"held 10 s after the clients left: {still}"
    assert eventually_ok(embed_url, within_s=5)


def test_sigterm_answers_accepted_requests_then_exits(embed_tag, logs):
    async def drain(server):
        async with aiohttp.ClientSession() as session:

            async def one(i):
                try:
                    async with session.post(
                        f"{server.url}/v1/embeddings", json={"input": [f"text {i} {j} " * 20 for j in range(16)]}
                    ) as response:
                        await response.read()
                        return response.status, response.headers.get("Retry-After")
                except aiohttp.ClientError as error:
                    return type(error).__name__, None

            # An upload still arriving at the signal, on a connection whose API worker has called the Encoder.
            upload = await UploadAfterAnother.open(server.url)
            # The signal comes with the first answer, whatever the machine's speed: the others are in flight,
            # and what is left is seconds of work on a slow CPU, not the half minute a fixed load can be there.
            accepted = [asyncio.create_task(one(i)) for i in range(16)]
            _, in_flight = await asyncio.wait(accepted, return_when=asyncio.FIRST_COMPLETED)
            exits.start()
            os.killpg(server.process.pid, signal.SIGTERM)
            answers = await asyncio.gather(*accepted)
            # A worker whose pooled connections are busy opens one more to the Encoder: its socket is still there.
            socket_kept = Path(encoder_socket).exists()
            # The Encoder has run no batch for longer than its quiet spell (1 s), but a caller still needs it.
            await asyncio.sleep(2.0)
            uploaded = await upload.finish()
            asked = time.monotonic()
            late = await one(99)
            return answers + [uploaded], len(in_flight), (late[0], time.monotonic() - asked), socket_kept

    with running(embed_tag, logs, "drain") as server:
        exits = ExitTimes(server.process.pid)
        (encoder_socket,) = {
            connection.laddr
            for connection in psutil.Process(server.process.pid).net_connections("unix")
            if "bentoml-uds" in connection.laddr
        }
        started = time.monotonic()
        answers, in_flight, late, socket_kept = asyncio.run(drain(server))
        server.process.wait(timeout=60)
        elapsed = time.monotonic() - started
        exits.join(timeout=1)
    print("\nSIGTERM:", answers, f"{in_flight} in flight at the signal;", late, f"exited after {elapsed:.1f} s;", exits)
    # The Encoder postpones its exit until the API workers' last calls are answered (serving/drain.py),
    # the upload's too, though its call came after a quiet spell.
    assert in_flight >= 8 and [status for status, _ in answers] == [200] * len(answers), (in_flight, answers)
    assert answers[-1] == (200, True), answers[-1]
    assert socket_kept, "the Encoder's socket file was removed while it drained (serving/compat/bentoml_arbiter.py)"
    refusal, waited_s = late
    # refused once the Encoder has exited and the arbiter closed the socket (seconds on a slow machine), not hung
    assert refusal in {"ClientConnectorError", "ClientOSError", "ServerDisconnectedError"} and waited_s < 30, (late, exits)
    assert elapsed < 60, exits


class UploadAfterAnother:
    """On one keep-alive connection (so one API worker): an embeddings request answered, then a second one's
    headers and half its body; ``finish`` sends the rest and returns the status, and whether it has a vector."""

    BODY = b'{"input": ["a request still uploading when the server was told to stop"]}'

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, url: str) -> "UploadAfterAnother":
        host, port = url.removeprefix("http://").split(":")
        upload = cls(*await asyncio.open_connection(host, int(port)))
        upload.send_head()
        upload.writer.write(cls.BODY)
        assert (await upload.answer())[0] == 200
        upload.send_head()
        upload.writer.write(cls.BODY[:20])
        await upload.writer.drain()
        return upload

    def send_head(self) -> None:
        self.writer.write(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: textbento\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(self.BODY)
        )

    async def answer(self) -> tuple[int | str, bool]:
        try:
            status = int((await self.reader.readline()).split()[1])
            length = 0
            while (line := await self.reader.readline()) not in {b"\r\n", b""}:
                name, _, value = line.decode().partition(":")
                length = int(value) if name.lower() == "content-length" else length
            body = await self.reader.readexactly(length)
        except (ConnectionError, IndexError, asyncio.IncompleteReadError) as error:
            return type(error).__name__, False
        return status, b'"embedding"' in body

    async def finish(self) -> tuple[int | str, bool]:
        self.writer.write(self.BODY[20:])
        await self.writer.drain()
        answered = await self.answer()
        self.writer.close()
        return answered


class ExitTimes(threading.Thread):
    """Seconds from ``start()`` to each process of a server's tree ending: which part outlived a signal."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        root = psutil.Process(pid)
        self.alive = {process: f"{role(' '.join(process.cmdline()))} {process.pid}" for process in [root, *root.children(recursive=True)]}
        self.ended: dict[str, float] = {}

    def run(self) -> None:
        began = time.monotonic()
        while self.alive and time.monotonic() - began < 120:
            for process in [process for process in self.alive if not process.is_running()]:
                self.ended[self.alive.pop(process)] = round(time.monotonic() - began, 1)
            time.sleep(0.2)

    def __repr__(self) -> str:
        return f"exits after SIGTERM (s): {self.ended}, still running: {sorted(self.alive.values())}"


# A process that counts 38 requests in progress in BentoML's gauge, then dies without a word (as a
# worker SIGKILLed or crashed with requests in flight, whose death a starting worker did not see).
GHOST = """
import os, prometheus_client as prom
gauge = prom.Gauge("request_in_progress", "", ["endpoint", "service_name", "service_version", "runner_name"],
                   namespace="bentoml_service", multiprocess_mode="livesum")
gauge.labels("/v1/embeddings", "textbento", "not available", "textbento").inc(38)
os._exit(0)
"""


def test_gauges_of_a_process_that_died_unseen_are_dropped(embed_server):
    directory = Path(psutil.Process(embed_server.process.pid).environ()["BENTOML_HOME"], "prometheus_multiproc_dir")
    subprocess.run([sys.executable, "-c", GHOST], env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}, check=True)
    # API workers sweep at each sample of textbento_held, each second
    deadline = time.monotonic() + 10
    while (held := [name for name, value in gauges(embed_server.url).items() if "request_in_progress" in name and value]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.25)
    assert not held, held


# A decoder whose position table is Qwen3's 32,768, tiny but for its 64 heads: its import caps it at 768 tokens.
CAPPED_DECODER = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 64, "num_key_value_heads": 2, "head_dim": 2}
CAP = 768
LONG = "words " * 1000  # past the cap


@pytest.fixture(scope="module")
def poisoned_decoder(tmp_path_factory, logs):
    """That decoder, served by an Encoder that dies on any text holding "@" and holds a call holding "#" a second
    (tests/dropping_encoder.py); one API worker with one call in flight, so that requests arriving meanwhile share the next."""
    root = tmp_path_factory.mktemp("poisoned-decoder")
    tokenizer_dir = build_decoder_tokenizer(root / "tokenizer", ["words of a text", "another text of words"] * 20)
    config = Qwen3Config(vocab_size=400, intermediate_size=64, max_position_embeddings=32768, **CAPPED_DECODER)
    tag = str(import_model(build_decoder(root / "model", tokenizer_dir, config), name="poisoned-decoder"))
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    env = {
        "TEXTBENTO_TEST_POISON_ID": str(tokenizer.convert_tokens_to_ids("@")),
        "TEXTBENTO_TEST_SLOW_ID": str(tokenizer.convert_tokens_to_ids("#")),
        "TEXTBENTO_WORKERS": "1",
        "TEXTBENTO_CALLS_IN_FLIGHT": "1",
        "TEXTBENTO_BACKEND": "onnx",  # no start-up self-check: a restart takes seconds less
    }
    with running(tag, logs, "poisoned-decoder", target="tests.dropping_encoder:TextBento", **env) as server:
        yield server


def test_a_decoder_is_served_at_the_cap_its_import_chose(poisoned_decoder):
    """/v1/models and TEI's /info show the same cap; a longer text is cut to it, or refused without truncation."""
    url = poisoned_decoder.url
    (card,) = requests.get(f"{url}/v1/models", timeout=30).json()["data"]
    assert (card["max_length"], card["model_max_length"]) == (CAP, 32768)
    assert requests.get(f"{url}/info", timeout=30).json()["max_input_length"] == CAP
    cut = requests.post(f"{url}/v1/embeddings", json={"input": LONG}, timeout=60)
    assert cut.status_code == 200 and cut.json()["usage"]["prompt_tokens"] == CAP, cut.text
    refused = requests.post(f"{url}/v1/embeddings", json={"input": ["short", LONG], "truncate": False}, timeout=60)
    assert refused.status_code == 413 and refused.json()["error"]["param"] == "input.1", refused.text


def test_a_text_that_kills_the_encoder_fails_alone_and_every_request_merged_with_it_is_answered(poisoned_decoder):
    """Six requests and a poisoned one wait behind a held call, then share the next one, which kills the Encoder:
    their texts are sent alone, one at a time; the poison kills the Encoder once more, alone, and only its
    request fails, with a 500 naming its text. Before, the merged call was sent three times: three Encoders
    killed, and all seven requests answered 503."""

    async def burst() -> list[tuple[int, dict]]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:

            async def post(texts: list[str]) -> tuple[int, dict]:
                async with session.post(f"{poisoned_decoder.url}/v1/embeddings", json={"input": texts}) as response:
                    return response.status, await response.json()

            held = asyncio.create_task(post(["a text # held a second"]))
            await asyncio.sleep(0.3)
            texts = [[f"text {i}", f"words {i}"] for i in range(3)] + [["fine", "one @ too many"]] + [[f"text {i}"] for i in range(3, 6)]
            return await asyncio.gather(held, *(post(each) for each in texts))

    log_before = poisoned_decoder.log.read_text()
    answers = asyncio.run(burst())
    log = poisoned_decoder.log.read_text()[len(log_before) :]
    statuses = [status for status, _ in answers]
    kills = log.count("test fault: the Encoder dies computing a poisoned text")
    print(f"\na poisoned text merged with 6 requests and a held one: statuses {statuses}, the Encoder killed {kills} times")
    assert statuses == [200] * 4 + [500] + [200] * 3, answers
    error = answers[4][1]["error"]
    assert error["type"] == "model_failed" and "text 1 of this request" in error["message"], error
    assert "stopped answering a call of 11 text(s)" in log  # the poisoned request shared its call with the six others
    assert kills == 2
    assert eventually_ok(poisoned_decoder.url, within_s=90)
