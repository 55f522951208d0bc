"""The socket hop (serving/socket_hop.py), in process: an Encoder's socket answered by a stand-in for the
batcher, and the API worker's calls to it; what a dead, cut or closing Encoder looks like to a caller,
and the way back to HTTP. Served end to end by every test that serves (the default hop); an Encoder
killed while computing on it: tests/test_faults.py."""

import asyncio
import os
import socket
from http import HTTPStatus
from pathlib import Path

import pytest
from bentoml.exceptions import BentoMLException, ServiceUnavailable

from serving import socket_hop
from serving.connections import open_connections
from serving.hop import LoneCalls, resend_unanswered, unsent
from serving.socket_hop import HELD, CutShort, Listening, NotSent, SocketCalls, frame, read_frame


@pytest.fixture
def tempdir(tmp_path, monkeypatch):
    """The sockets' directory under ``tmp_path`` (a socket's path must stay short: pytest's may not)."""
    short = Path(f"/tmp/tb-{os.getpid()}-{tmp_path.name[-12:]}")
    short.mkdir(mode=0o700)
    monkeypatch.setattr(socket_hop.tempfile, "gettempdir", lambda: str(short))
    yield short
    for path in sorted(short.rglob("*"), reverse=True):
        path.unlink() if not path.is_dir() else path.rmdir()
    short.rmdir()


async def doubled(items):
    await asyncio.sleep(0.01)
    return [2 * item for item in items]


@pytest.fixture
def hops(monkeypatch) -> list:
    """The hop of each call the API worker's side sends, as ``textbento_encoder_calls`` counts them: (model, hop)."""
    counted: list = []
    monkeypatch.setattr(socket_hop.telemetry, "encoder_call", lambda model, hop: counted.append((model, hop)))
    return counted


def by_http(record: list):
    async def http(items):
        record.append(items)
        return ["by http"] * len(items)

    return http


def test_calls_go_on_the_socket_into_the_answerer_and_connections_are_reused(tempdir):
    async def scenario():
        before = HELD.connections  # earlier tests' loops closed, their connections unseen
        listening = Listening("model-a", doubled)
        http_calls: list = []
        calls = SocketCalls(listening.path, by_http(http_calls), "model")
        answers = [await calls([1, 2]), await calls([3])]
        both = await asyncio.gather(calls([4]), calls([5]))  # two in flight: two connections
        held = HELD.connections - before, open_connections() - before
        listening.close()
        return answers, both, http_calls, held, len(calls.idle), listening.path

    answers, both, http_calls, held, idle, path = asyncio.run(scenario())
    assert answers == [[2, 4], [6]] and both == [[8], [10]] and http_calls == []
    assert held[0] == 2 and held[1] >= 2 and idle == 2
    assert not path.exists() and not path.parent.exists(), "closing removes the socket, and the server's directory with its last"


def test_the_encoders_errors_keep_their_status(tempdir, monkeypatch):
    async def answer(items):
        if items == ["shed"]:
            raise ServiceUnavailable("queue full")
        if items == ["slow"]:
            await asyncio.sleep(5)
        if items == ["broken"]:
            raise ValueError("a bug")
        return items

    monkeypatch.setattr(socket_hop.settings, "timeout_s", 0.2)

    async def scenario():
        listening = Listening("model-b", answer)
        calls = SocketCalls(listening.path, by_http([]), "model")
        statuses = []
        for items in (["shed"], ["slow"], ["broken"]):
            with pytest.raises(BentoMLException) as raised:
                await calls(items)
            statuses.append(raised.value.error_code)
        ok = await calls(["fine"])
        listening.close()
        return statuses, ok

    statuses, ok = asyncio.run(scenario())
    assert statuses == [HTTPStatus.SERVICE_UNAVAILABLE, HTTPStatus.GATEWAY_TIMEOUT, HTTPStatus.INTERNAL_SERVER_ERROR]
    assert ok == ["fine"]


def test_where_the_socket_cannot_be_reached_calls_go_by_http_and_come_back(tempdir, monkeypatch, hops):
    monkeypatch.setattr(socket_hop, "RETRY_SOCKET_S", 0.1)

    async def scenario():
        http_calls: list = []
        calls = socket_hop.calls("model-c", by_http(http_calls))
        before = await calls([1])  # no Encoder listening yet: by HTTP
        listening = Listening("model-c", doubled)
        meanwhile = await calls([2])  # within the retry spell: HTTP still
        await asyncio.sleep(0.15)
        after = await calls([3])
        listening.close()
        return before, meanwhile, after, http_calls

    before, meanwhile, after, http_calls = asyncio.run(scenario())
    assert before == ["by http"] and meanwhile == ["by http"] and after == [6]
    assert http_calls == [[1], [2]]
    assert hops == [("model-c", "http"), ("model-c", "http"), ("model-c", "socket")]  # the fallback shows in /metrics


def test_a_directory_that_is_not_the_users_alone_is_not_used(tempdir):
    async def scenario():
        path = socket_hop.socket_path("model-d")
        path.parent.mkdir(mode=0o755)
        path.parent.chmod(0o755)  # whatever the umask
        listening = Listening("model-d", doubled)
        http_calls: list = []
        answer = await SocketCalls(path, by_http(http_calls), "model")([1])
        return listening.path, answer, http_calls, path.exists()

    listening_path, answer, http_calls, made = asyncio.run(scenario())
    assert listening_path is None and not made
    assert answer == ["by http"] and http_calls == [[1]]


def test_the_http_setting_and_traces_take_the_socket_away(monkeypatch, hops):
    assert socket_hop.socket_path("m") is not None
    monkeypatch.setattr(socket_hop.settings, "otlp_endpoint", "http://collector:4318/v1/traces")
    assert socket_hop.socket_path("m") is None
    monkeypatch.setattr(socket_hop.settings, "otlp_endpoint", "")
    monkeypatch.setattr(socket_hop.settings, "encoder_hop", "http")
    assert socket_hop.socket_path("m") is None and asyncio.run(socket_hop.calls("m", doubled)([1, 2])) == [2, 4]
    assert hops == [("m", "http")]


async def fake_encoder(path: Path, behaviour: str):
    """An Encoder that reads a call and then closes (``died``), answers half a frame (``cut``), or never
    accepts the connection, which its death resets with the call unread (``unread``). Returns its stop."""
    if behaviour == "unread":
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listening.bind(str(path))
        listening.listen(8)
        asyncio.get_running_loop().call_later(0.1, listening.close)
        return listening.close

    async def serve(reader, writer):
        await read_frame(reader)
        if behaviour == "cut":
            answer = frame((200, [b"x" * 1000]))
            writer.write(answer[: len(answer) // 2])
            await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(serve, str(path))
    return server.close


@pytest.mark.parametrize(("behaviour", "error"), [("died", CutShort), ("cut", CutShort), ("unread", NotSent)])
def test_a_call_is_told_unsent_only_where_the_encoder_never_read_it(tempdir, behaviour, error):
    async def scenario():
        path = socket_hop.socket_path("model-e")
        path.parent.mkdir(mode=0o700)
        stop = await fake_encoder(path, behaviour)
        try:
            await SocketCalls(path, by_http([]), "model")([1, 2])
        except Exception as raised:
            return raised
        finally:
            stop()

    raised = asyncio.run(scenario())
    assert isinstance(raised, error), raised
    assert unsent(raised) is (error is NotSent)


def test_a_cut_call_is_sent_again_text_by_text_and_a_cancelled_one_leaves_no_answer_behind(tempdir):
    """A cancelled call's connection is closed, neither reused (its late answer would be read as another
    call's) nor left open."""
    lone = []

    async def answer(items):
        if items == ["slow"]:
            await asyncio.sleep(0.2)
            return ["late"]
        lone.append(items)
        return items

    async def scenario():
        before = HELD.connections
        listening = Listening("model-f", answer)
        calls = SocketCalls(listening.path, by_http([]), "model")
        slow = asyncio.create_task(calls(["slow"]))
        await asyncio.sleep(0.05)
        slow.cancel()
        await asyncio.gather(slow, return_exceptions=True)
        await asyncio.sleep(0.3)  # the late answer has been written by now
        after = [await calls(["a"]), await calls(["b"])]
        await asyncio.sleep(0.05)
        held = HELD.connections - before
        listening.close()
        return after, held

    after, held = asyncio.run(scenario())
    assert after == [["a"], ["b"]]
    assert held == 1, "the cancelled call's connection is closed, not left open"

    async def cut():
        path = socket_hop.socket_path("model-g")
        path.parent.mkdir(mode=0o700, exist_ok=True)
        stop = await fake_encoder(path, "died")
        try:
            return await resend_unanswered(SocketCalls(path, by_http(lone), "model"), attempts=3, lone=LoneCalls("g", str(tempdir)))([1, 2])
        finally:
            stop()

    # Sent again text by text, alone; the fake Encoder dies on each of them too, so each fails alone.
    answers = asyncio.run(cut())
    assert [type(answer).__name__ for answer in answers] == ["ItemFailed", "ItemFailed"]


def test_idle_connections_are_closed_by_the_caller_and_hold_no_task_in_the_encoder(tempdir, monkeypatch):
    """As BentoML's HTTP client sweeps its pool: the storm's check that pooled connections expire holds on the socket too."""
    monkeypatch.setattr(socket_hop, "CALLER_IDLE_S", 0.1)

    async def scenario():
        before, tasks = HELD.connections, len(asyncio.all_tasks())
        listening = Listening("model-h", doubled)
        calls = SocketCalls(listening.path, by_http([]), "model")
        await asyncio.gather(calls([1]), calls([2]))
        await asyncio.sleep(0.02)
        pooled = HELD.connections - before, len(asyncio.all_tasks()) - tasks
        await asyncio.sleep(0.35)
        after = HELD.connections - before, len(calls.idle), calls.sweeping
        listening.close()
        return pooled, after

    pooled, after = asyncio.run(scenario())
    assert pooled == (2, 0), "two idle connections, and no task of the Encoder's for them"
    assert after == (0, 0, None)


def test_a_socket_whose_server_did_not_start_is_removed_and_calls_go_by_http(tempdir, monkeypatch):
    """Else calls would wait in the backlog of a socket no one accepts on, until their deadline."""

    async def scenario():
        async def broken(*args, **kwargs):
            raise OSError("no server")

        monkeypatch.setattr(asyncio.get_running_loop(), "create_unix_server", broken)
        listening = Listening("model-i", doubled)
        path = socket_hop.socket_path("model-i")
        await asyncio.sleep(0.01)
        http_calls: list = []
        answer = await asyncio.wait_for(SocketCalls(path, by_http(http_calls), "model")([1]), 5)
        return listening.path, answer, http_calls

    path, answer, http_calls = asyncio.run(scenario())
    assert not path.exists() and answer == ["by http"] and http_calls == [[1]]
