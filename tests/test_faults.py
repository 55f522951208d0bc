"""Faults under load: a killed runner or worker is replaced, disconnects leave nothing behind, SIGTERM drains."""

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import psutil
import pytest

from bench.storm import gauges, idle_levels, settled
from harness.load import closed_loop
from harness.serving import role
from tests.conftest import eventually_ok, running


def workers(process, service):
    return [p for p in psutil.Process(process.pid).children(recursive=True) if f"--service-name {service}" in " ".join(p.cmdline())]


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
    """The calls in flight lose their connection before any answer, so they are sent again
    (serving/hop.py) and wait in the Encoder's socket backlog, which the arbiter keeps open, until
    the new Encoder answers them: 200 a few seconds late, not 503."""
    (runner,) = workers(fault_server.process, "encoder")
    result = load_while(fault_server.url, lambda: runner.send_signal(signal.SIGKILL))
    print("\nrunner killed:", result.summary())
    assert set(result.statuses) == {200}, result.sample_errors
    assert "sending it again" in fault_server.log.read_text()
    assert eventually_ok(fault_server.url, within_s=90)
    assert [p.pid for p in workers(fault_server.process, "encoder")] != [runner.pid]


def test_killed_api_worker_is_replaced(fault_server):
    victim = workers(fault_server.process, "textbento")[0]
    result = load_while(fault_server.url, lambda: victim.send_signal(signal.SIGKILL))
    print("\nAPI worker killed:", result.summary())
    # Requests on the killed process's own connections can only see the connection drop;
    # none may get a 5xx, and the other worker keeps answering.
    assert not {s for s in result.statuses if isinstance(s, int) and s >= 500}, result.sample_errors
    assert result.statuses[200] > 0
    assert eventually_ok(fault_server.url, within_s=90)
    deadline = time.monotonic() + 60
    while len(workers(fault_server.process, "textbento")) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert victim.pid not in [p.pid for p in workers(fault_server.process, "textbento")]


@pytest.mark.parametrize(
    ("where", "attempts"), [("request", 3), ("request", 1), ("answer", 3)], ids=["sent-again", "sent-once", "cut-answer-sent-again"]
)
def test_calls_dropped_before_an_answer_are_sent_again(embed_tag, logs, where, attempts):
    """The Encoder's server drops every 7th call's connection as the call arrives, or halfway through
    its answer (tests/dropping_encoder.py): the failed hop of a keep-alive race or a dying Encoder,
    made to happen. Sent again (the default 3 attempts), every request gets 200; sent once
    (``TEXTBENTO_ENCODER_ATTEMPTS=1``), requests are lost. With 2 attempts a resend that is itself a
    7th call is lost too (1 of 300 in one run): the drops here strike resends as readily as calls."""
    env = {"TEXTBENTO_TEST_DROP_EVERY": "7", "TEXTBENTO_TEST_DROP_AT": where, "TEXTBENTO_ENCODER_ATTEMPTS": str(attempts)}
    with running(embed_tag, logs, f"drop-{where}-{attempts}", target="tests.dropping_encoder:TextBento", **env) as server:
        body = lambda i: {"input": [f"text {i} {j}" for j in range(1 + i % 4)]}
        result = asyncio.run(closed_loop(f"{server.url}/v1/embeddings", body, concurrency=8, requests=300, deadline_s=90))
        log = server.log.read_text()
    print(f"\n{where}, {attempts} attempt(s):", result.summary())
    assert log.count("test fault: connection dropped") >= 5
    if attempts > 1:
        assert result.statuses == {200: 300}, result.sample_errors
        assert log.count("sending it again") >= 5
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
    assert settle_s is not None, f"held 10 s after the clients left: {still}"
    assert eventually_ok(embed_url, within_s=5)


def test_sigterm_answers_accepted_requests_then_exits(embed_tag, logs):
    async def drain(server):
        async with aiohttp.ClientSession() as session:

            async def one(i):
                try:
                    async with session.post(
                        f"{server.url}/v1/embeddings", json={"input": [f"text {i} {j} " * 20 for j in range(64)]}
                    ) as response:
                        await response.read()
                        return response.status, response.headers.get("Retry-After")
                except aiohttp.ClientError as error:
                    return type(error).__name__, None

            accepted = [asyncio.create_task(one(i)) for i in range(16)]
            await asyncio.sleep(1.0)
            exits.start()
            os.killpg(server.process.pid, signal.SIGTERM)
            answers = await asyncio.gather(*accepted)
            asked = time.monotonic()
            late = await one(99)
            return answers, (late[0], time.monotonic() - asked)

    with running(embed_tag, logs, "drain") as server:
        exits = ExitTimes(server.process.pid)
        started = time.monotonic()
        answers, late = asyncio.run(drain(server))
        server.process.wait(timeout=60)
        elapsed = time.monotonic() - started
        exits.join(timeout=1)
    print("\nSIGTERM:", answers, late, f"exited after {elapsed:.1f} s;", exits)
    # The Encoder postpones its exit until the API workers' last calls are answered (serving/drain.py).
    assert [status for status, _ in answers] == [200] * len(answers), answers
    refusal, waited_s = late
    # refused once the Encoder has exited and the arbiter closed the socket (seconds on a slow machine), not hung
    assert refusal in {"ClientConnectorError", "ClientOSError", "ServerDisconnectedError"} and waited_s < 30, (late, exits)
    assert elapsed < 60, exits


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
