"""CallTimeout ends an overrunning block like asyncio.timeout does, and leaves quick blocks and other
cancellations alone, however often one instance is reused."""

from __future__ import annotations

import asyncio

import pytest

from ludic_core.call_timeout import CallTimeout, call_timeout


async def test_a_block_that_overruns_raises_timeout_error_on_time() -> None:
    timeout = CallTimeout()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        async with timeout.within(0.05):
            await asyncio.sleep(5)
    assert 0.04 <= loop.time() - started < 1.0
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_quick_blocks_reuse_one_timer_and_a_later_overrun_still_fires() -> None:
    timeout = CallTimeout()
    for _ in range(50):
        async with timeout.within(0.2):
            await asyncio.sleep(0)
    # The timer armed by the first block fires before this block's deadline and re-arms for it.
    await asyncio.sleep(0.1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        async with timeout.within(0.2):
            await asyncio.sleep(5)
    assert 0.19 <= loop.time() - started < 1.0


async def test_a_shorter_bound_than_the_armed_timer_is_honoured() -> None:
    timeout = CallTimeout()
    async with timeout.within(60):
        await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        async with timeout.within(0.05):
            await asyncio.sleep(5)
    assert loop.time() - started < 1.0


async def test_no_bound_and_a_block_after_the_deadline_passed_idle() -> None:
    timeout = CallTimeout()
    async with timeout.within(0.02):
        pass
    await asyncio.sleep(0.05)  # the timer fires between blocks and does nothing
    async with timeout.within(None):
        await asyncio.sleep(0.03)
    async with timeout.within(0.5):
        await asyncio.sleep(0.01)


async def test_an_outside_cancellation_propagates_as_cancelled_error() -> None:
    timeout = CallTimeout()

    async def call() -> None:
        async with timeout.within(10):
            await asyncio.sleep(5)

    task = asyncio.ensure_future(call())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The instance is free again afterwards.
    async with timeout.within(0.5):
        await asyncio.sleep(0)


async def test_blocks_in_different_tasks_one_after_the_other() -> None:
    timeout = CallTimeout()

    async def quick() -> None:
        async with timeout.within(0.05):
            await asyncio.sleep(0)

    async def slow() -> None:
        async with timeout.within(0.05):
            await asyncio.sleep(5)

    await asyncio.ensure_future(quick())
    with pytest.raises(TimeoutError):
        await asyncio.ensure_future(slow())


async def test_overlapping_blocks_of_one_instance_are_refused() -> None:
    timeout = CallTimeout()
    async with timeout.within(1):
        with pytest.raises(RuntimeError, match="one block at a time"):
            async with timeout.within(1):
                pass


async def test_call_timeout_shares_spare_timers_and_still_bounds_each_block() -> None:
    first = call_timeout(1.0)
    async with first:
        await asyncio.sleep(0)
    second = call_timeout(1.0)
    assert second is first  # the idle timer was handed on

    async def overlapping(seconds: float) -> CallTimeout:
        timer = call_timeout(seconds)
        async with timer:
            await asyncio.sleep(0.01)
        return timer

    async with second:
        pass
    timers = await asyncio.gather(*(overlapping(1.0) for _ in range(3)))
    assert len({id(t) for t in timers}) == 3  # blocks running at once never share one
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        async with call_timeout(0.05):
            await asyncio.sleep(5)
    assert loop.time() - started < 1.0


async def test_a_plain_with_block_bounds_like_async_with() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError), call_timeout(0.05):
        await asyncio.sleep(5)
    assert loop.time() - started < 1.0
    with call_timeout(0.5):
        await asyncio.sleep(0)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_timers_of_different_bounds_are_pooled_apart() -> None:
    long = call_timeout(60.0)
    with long:
        await asyncio.sleep(0)
    # A shorter bound never takes the long bound's armed timer (which would have to be cancelled).
    short = call_timeout(0.05)
    assert short is not long
    with pytest.raises(TimeoutError), short:
        await asyncio.sleep(5)
    assert call_timeout(60.0) is long
    with pytest.raises(RuntimeError, match="keeps the bound"):
        long.within(1.0)


def test_finished_event_loops_are_not_kept_alive_by_their_timers() -> None:
    import gc
    import weakref

    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def calls() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        for bound in (5.0, 60.0):
            with call_timeout(bound):
                await asyncio.sleep(0)

    for _ in range(3):
        asyncio.run(calls())
    gc.collect()
    assert [ref() for ref in loops] == [None, None, None]
