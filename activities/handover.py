"""Watches that hand over when their worker shuts down (docs/upgrades.md#upgrading-the-embedded-stack).

A watch runs as long as what it follows: left alone, a stopping worker waits its whole graceful shutdown
(worker.main) for them, then cancels them. A watch wrapped here ends as soon as its worker begins to shut
down, with a retryable WorkerShutdown error (benign: the worker logs no traceback): its retry policy sends
the next attempt to a worker still polling, which resumes from what is stored. Nothing is lost that a
cancelled attempt would not lose.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

WORKER_SHUTDOWN = "WorkerShutdown"

P = ParamSpec("P")
T = TypeVar("T")


def hands_over(watch: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    @functools.wraps(watch)
    async def handing_over(*args: P.args, **kwargs: P.kwargs) -> T:
        work = asyncio.ensure_future(watch(*args, **kwargs))
        shutdown = asyncio.ensure_future(activity.wait_for_worker_shutdown())
        try:
            await asyncio.wait([work, shutdown], return_when=asyncio.FIRST_COMPLETED)
        finally:
            shutdown.cancel()
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
        if work.cancelled():
            raise ApplicationError(
                "its worker is shutting down: retried on another",
                type=WORKER_SHUTDOWN,
                category=ApplicationErrorCategory.BENIGN,  # expected: not logged as a failure
            )
        return work.result()

    return handing_over
