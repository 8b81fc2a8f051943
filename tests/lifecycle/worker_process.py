"""A Ferry worker in a process of its own, for tests that kill it.

    python -m tests.lifecycle.worker_process QUEUE

It reads FERRY_HOME and FERRY_TEMPORAL_ADDRESS like `ferry worker`, serves task queue QUEUE, prints
`ready` once it polls, and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from core.settings import Settings
from store import open_store
from worker.main import build_worker, local_instances
from worker.temporal import connect_from_settings

READY = "ready"


async def serve(queue: str) -> None:
    settings = Settings.from_env()
    client = await connect_from_settings(settings)
    instances = local_instances(settings)
    worker = build_worker(client, instances, open_store(settings.database_url), task_queue=queue)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with worker:
        print(READY, flush=True)
        await stop.wait()
    await instances.aclose()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
