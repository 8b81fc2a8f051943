"""An activity's heartbeats while it works: the server then knows the attempt lives, and can cancel it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from temporalio import activity

# The job workflow gives its steps a heartbeat timeout of 10 s (the watch 20 s): a lost worker is
# noticed, and a stop that cancels a step is heard, within that.
_HEARTBEAT_EVERY = 1.0


@dataclass
class Progress:
    """What a step says in its heartbeats: `ferry ps` shows it for a pulling job (cli/pulls.py)."""

    line: str | None = None


@contextlib.asynccontextmanager
async def heartbeating(progress: Progress | None = None) -> AsyncIterator[None]:
    """Heartbeat while the body runs: the server then knows the attempt lives, and can cancel it. The
    heartbeats carry `progress` when it has a line (the SDK sends the latest at most every 0.8 x the
    step's heartbeat timeout). The first after _HEARTBEAT_EVERY: a step done sooner sends none, since each
    heartbeat the SDK sends is a write of the workflow's state in Temporal (docs/scaling.md#the-hot-path)."""

    if activity.info().is_local:  # an array's batch of starts (activities/elements.py): no heartbeats
        yield
        return

    async def beat() -> None:
        while True:
            await asyncio.sleep(_HEARTBEAT_EVERY)
            if progress is not None and progress.line is not None:
                activity.heartbeat(progress.line)
            else:
                activity.heartbeat()

    beating = asyncio.create_task(beat())
    try:
        yield
    finally:
        beating.cancel()
