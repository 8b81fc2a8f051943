"""A watch hands over as soon as its worker begins to shut down (activities/handover.py): the attempt ends
with a retryable WorkerShutdown error, the watch itself cancelled; otherwise it is left alone."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.handover import WORKER_SHUTDOWN, hands_over


async def test_a_watch_ends_retryably_once_its_worker_shuts_down() -> None:
    cancelled = asyncio.Event()

    @hands_over
    async def watch(name: str) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return name

    env = ActivityEnvironment()
    attempt = asyncio.ensure_future(env.run(watch, "w"))
    await asyncio.sleep(0.05)
    assert not attempt.done()
    env.worker_shutdown()
    with pytest.raises(ApplicationError) as raised:
        await asyncio.wait_for(attempt, 5)
    assert raised.value.type == WORKER_SHUTDOWN and not raised.value.non_retryable
    assert cancelled.is_set()


async def test_a_watch_that_ends_by_itself_returns_its_result_and_raises_its_errors() -> None:
    @hands_over
    async def watch(fail: bool) -> str:
        await asyncio.sleep(0.01)
        if fail:
            raise ValueError("lost")
        return "changed"

    env = ActivityEnvironment()
    assert await env.run(watch, False) == "changed"
    with pytest.raises(ValueError, match="lost"):
        await env.run(watch, True)


async def test_a_cancelled_watch_is_cancelled_as_before() -> None:
    @hands_over
    async def watch() -> None:
        await asyncio.sleep(3600)

    env = ActivityEnvironment()
    attempt = asyncio.ensure_future(env.run(watch))
    await asyncio.sleep(0.05)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(attempt, 5)
