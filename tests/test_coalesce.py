"""serving.coalesce: concurrent submits share calls, in order, without losing or leaking work."""

from __future__ import annotations

import asyncio

import pytest

from serving.coalesce import Coalescer, ItemFailed, Overloaded


class GatedCall:
    """A runner stand-in: records each call's items and answers them doubled when released."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[list[int]] = []
        self.release = asyncio.Event()
        self.fail_on = fail_on

    async def __call__(self, items: list[int]) -> list[int]:
        self.calls.append(items)
        await self.release.wait()
        if self.fail_on in items:
            raise RuntimeError("runner unavailable")
        return [2 * item for item in items]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_lone_submit_goes_at_once():
    async def scenario():
        call = GatedCall()
        call.release.set()
        assert await Coalescer(call, max_items=8, in_flight=1).submit([1, 2]) == [2, 4]
        assert call.calls == [[1, 2]]

    asyncio.run(scenario())


def test_submits_that_wait_share_the_next_call_in_arrival_order():
    async def scenario():
        call = GatedCall()
        coalescer = Coalescer(call, max_items=8, in_flight=1)
        first = asyncio.create_task(coalescer.submit([1]))
        await settle()
        waiting = [asyncio.create_task(coalescer.submit(items)) for items in ([2, 3], [4], [5, 6, 7])]
        await settle()
        assert call.calls == [[1]]  # one call in flight; the rest wait for it
        call.release.set()
        assert await first == [2] and [await task for task in waiting] == [[4, 6], [8], [10, 12, 14]]
        assert call.calls == [[1], [2, 3, 4, 5, 6, 7]]

    asyncio.run(scenario())


def test_a_call_never_carries_more_than_max_items():
    async def scenario():
        call = GatedCall()
        coalescer = Coalescer(call, max_items=4, in_flight=1)
        first = asyncio.create_task(coalescer.submit([0]))
        await settle()
        waiting = [asyncio.create_task(coalescer.submit(items)) for items in ([1, 2, 3], [4, 5], [6, 7, 8, 9, 10])]
        await settle()
        call.release.set()
        await asyncio.gather(first, *waiting)
        assert call.calls == [[0], [1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]  # the oversized one cut in pieces
        assert waiting[2].result() == [12, 14, 16, 18, 20]

    asyncio.run(scenario())


def test_in_flight_bounds_the_concurrent_calls():
    async def scenario():
        call = GatedCall()
        coalescer = Coalescer(call, max_items=8, in_flight=2)
        tasks = [asyncio.create_task(coalescer.submit([item])) for item in range(5)]
        await settle()
        assert call.calls == [[0], [1]]
        call.release.set()
        assert [await task for task in tasks] == [[0], [2], [4], [6], [8]]
        assert call.calls == [[0], [1], [2, 3, 4]]

    asyncio.run(scenario())


def test_an_abandoned_submit_is_never_sent():
    async def scenario():
        call = GatedCall()
        coalescer = Coalescer(call, max_items=8, in_flight=1)
        first = asyncio.create_task(coalescer.submit([1]))
        await settle()
        abandoned = asyncio.create_task(coalescer.submit([2]))
        kept = asyncio.create_task(coalescer.submit([3]))
        await settle()
        abandoned.cancel()
        await settle()
        call.release.set()
        assert await first == [2] and await kept == [6]
        assert call.calls == [[1], [3]]

    asyncio.run(scenario())


def test_a_failed_call_fails_its_submits_only():
    async def scenario():
        call = GatedCall(fail_on=2)
        coalescer = Coalescer(call, max_items=8, in_flight=1)
        first = asyncio.create_task(coalescer.submit([1]))
        await settle()
        failing = [asyncio.create_task(coalescer.submit(items)) for items in ([2], [3])]
        await settle()
        call.release.set()
        assert await first == [2]
        for task in failing:
            with pytest.raises(RuntimeError, match="runner unavailable"):
                await task
        assert await coalescer.submit([4]) == [8]  # the next call goes out as usual

    asyncio.run(scenario())


def test_an_item_the_call_could_not_compute_fails_only_the_submit_that_carried_it():
    """A call answers one item with ``ItemFailed``: the submit that carried it fails, told the item's place
    among its own items (across the pieces it was cut into); the submits merged with it get their results."""

    async def scenario():
        async def call(items: list[int]) -> list:
            return [ItemFailed("it breaks the model", index=9) if item == 13 else 2 * item for item in items]

        blocker_released = asyncio.Event()

        async def gated(items: list[int]) -> list:
            if items == [0]:
                await blocker_released.wait()
            return await call(items)

        coalescer = Coalescer(gated, max_items=4, in_flight=1)
        blocker = asyncio.create_task(coalescer.submit([0]))
        await settle()
        merged = [asyncio.create_task(coalescer.submit(items)) for items in ([1, 2], [10, 11, 12, 14, 13], [3])]
        await settle()
        blocker_released.set()
        assert await blocker == [0]
        assert await merged[0] == [2, 4] and await merged[2] == [6]
        with pytest.raises(ItemFailed, match="it breaks the model") as failed:
            await merged[1]
        assert failed.value.index == 4  # the fifth of its submit's items: the first of its second piece

    asyncio.run(scenario())


def test_a_submit_the_queue_could_not_answer_in_time_is_refused_at_once():
    """A queue whose oldest piece has waited longer than a caller's time left refuses it; one given up doesn't count."""

    async def scenario():
        call = GatedCall()
        coalescer = Coalescer(call, max_items=1, in_flight=1)
        blocker = asyncio.create_task(coalescer.submit([0]))
        waiting = asyncio.create_task(coalescer.submit([1]))
        await asyncio.sleep(0.05)  # the queue (item 1) has stood 0.05 s
        with pytest.raises(Overloaded):
            await coalescer.submit([2], within_s=0.01)
        patient = asyncio.create_task(coalescer.submit([3], within_s=30))
        waiting.cancel()
        await settle()
        # behind 3, which has stood ~0 s (the cancelled piece had stood 0.05 s: counted, it would refuse this one)
        fresh = asyncio.create_task(coalescer.submit([4], within_s=0.04))
        call.release.set()
        assert (await blocker, await patient, await fresh) == ([0], [6], [8])
        assert call.calls == [[0], [3], [4]]

    asyncio.run(scenario())


def test_callers_who_leave_take_their_pieces_out_of_the_queue_at_once():
    """Nothing is held for a caller who is gone, even when no later submit comes to sweep the queue."""

    async def scenario():
        call = GatedCall()
        coalescer = Coalescer(call, max_items=2, in_flight=1)
        sent = asyncio.create_task(coalescer.submit([1, 2]))
        await settle()
        waiting = [asyncio.create_task(coalescer.submit([i, i])) for i in range(3, 9)]
        await settle()
        assert coalescer.queued == 7  # one piece in the call, six waiting
        for task in [sent, *waiting]:
            task.cancel()
        await settle()
        assert len(coalescer.pending) == 0 and coalescer.queued == 1  # the call already sent is still out
        call.release.set()
        await settle()
        assert call.calls == [[1, 2]] and coalescer.queued == 0

    asyncio.run(scenario())
