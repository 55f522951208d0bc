"""An Encoder call on the wire (serving/wire.py) and on its route (serving/encoder_route.py): lossless
both ways, one body each way, merged by the batcher, and every failure a status the hop reads."""

import asyncio
import time

import numpy as np
import pytest
from starlette.testclient import TestClient

from models.batching import with_segments
from models.inference import Pass
from serving.encoder_route import PATH, EncoderRoute, Overloaded
from serving.wire import BadFrame, answer_from_wire, answer_to_wire, frame, ids_from_wire, ids_to_wire, rows_from_wire, unframe


def test_ids_and_rows_come_back_equal():
    ids = [np.arange(5, dtype=np.int32), with_segments(np.array([101, 7, 102, 9, 102], dtype=np.int32), np.array([0, 0, 0, 1, 1]))]
    rows = list(np.random.default_rng(0).standard_normal((3, 384)).astype(np.float32))
    for sent, back in zip(ids, ids_from_wire(unframe(frame(ids_to_wire(ids, key=-7, deadline=1234.5))))):
        assert (back.key, back.deadline) == (-7, 1234.5) and back.ids.dtype == np.int32 and np.array_equal(back.ids, sent)
    passes = [Pass(1.5, 2.5, 3, 30, 21), None, Pass(1.5, 2.5, 3, 30, 21)]
    answers = answer_from_wire(answer_to_wire(rows, passes))
    for (row, forward), sent, sent_pass in zip(answers, rows, passes):
        assert np.array_equal(rows_from_wire([row])[0], sent) and forward == sent_pass
    assert isinstance(answers[0][1].texts, int) and answers[0][1] is answers[2][1]  # one pass, told once


def test_frames_of_nothing_and_of_empty_parts_come_back_equal():
    assert unframe(frame([])) == []
    assert [bytes(part) for part in unframe(frame([b"", b"ab", b""]))] == [b"", b"ab", b""]
    assert answer_from_wire(answer_to_wire([], [])) == []


@pytest.mark.parametrize("body", [b"", b"\x01\x00", b"\x02\x00\x00\x00\x01\x00\x00\x00", frame([b"abc"])[:-1], frame([b"abc"]) + b"x"])
def test_a_body_that_is_not_a_frame_is_refused(body):
    with pytest.raises(BadFrame):
        unframe(body)


def served(encode, max_batch_size: int = 64) -> TestClient:
    route = EncoderRoute()
    route.serve("test", encode, max_batch_size=max_batch_size, max_latency_ms=60_000)
    return TestClient(route.app())


def texts(count: int, key: int = 0) -> bytes:
    return frame(ids_to_wire([np.arange(i + 1, dtype=np.int32) for i in range(count)], key=key))


def test_concurrent_calls_are_merged_into_one_batch_and_each_gets_its_own_rows():
    batches = []

    async def encode(batch):
        batches.append([text.key for text in batch])
        await asyncio.sleep(0.2)  # the calls that arrive meanwhile wait together for the next batch
        rows = [np.full(4, text.key * 100 + len(text.ids), np.float32) for text in batch]
        return rows, [Pass(0.0, 1.0, len(batch), 0, 0)] * len(batch)

    with served(encode) as client:
        first = client.portal.start_task_soon(lambda: asyncio.to_thread(client.post, PATH, content=texts(1, key=9)))
        time.sleep(0.05)
        later = [client.portal.start_task_soon(lambda k=k: asyncio.to_thread(client.post, PATH, content=texts(3, key=k))) for k in (1, 2)]
        answers = [future.result(timeout=10) for future in [first, *later]]
    assert all(answer.status_code == 200 and answer.headers["content-type"] == "application/octet-stream" for answer in answers)
    assert batches[0] == [9] and sorted(batches[1]) == [1, 1, 1, 2, 2, 2], batches  # two calls, one batch
    for answer, key, count in zip(answers, (9, 1, 2), (1, 3, 3)):
        rows = rows_from_wire([row for row, _ in answer_from_wire(answer.content)])
        assert [row[0] for row in rows] == [key * 100 + i + 1 for i in range(count)]


def test_failures_are_statuses_the_hop_reads():
    async def fails(batch):
        raise RuntimeError("the model broke")

    async def sheds(batch):
        raise Overloaded("shed")

    with served(fails) as client:
        assert client.post(PATH, content=texts(2)).status_code == 500
        assert client.post(PATH, content=b"not a frame").status_code == 400
        assert client.get(PATH).status_code == 405
    with served(sheds) as client:
        assert client.post(PATH, content=texts(2)).status_code == 503
    with TestClient(EncoderRoute().app()) as client:  # mounted, not serving yet: the Encoder is still loading
        assert client.post(PATH, content=texts(1)).status_code == 503
