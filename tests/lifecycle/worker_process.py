"""A Ferry worker in a process of its own, for tests that kill it.

    python -m tests.lifecycle.worker_process QUEUE [--broken-release]

It reads FERRY_HOME and FERRY_TEMPORAL_ADDRESS like `ferry worker`, serves task queue QUEUE, prints
`ready` once it polls, and stops on SIGTERM. With `--broken-release` its RunWorkflow is one changed
without a patch (tests/workflows/broken_release.py): a run it picks up from another worker is stuck.
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


def break_the_release() -> None:
    import worker.main
    from tests.workflows.broken_release import RunWorkflowThatForgetsTheStore
    from workflows.run import RunWorkflow

    workflows = [RunWorkflowThatForgetsTheStore if w is RunWorkflow else w for w in worker.main.WORKFLOWS]
    worker.main.WORKFLOWS = workflows


if __name__ == "__main__":
    if "--broken-release" in sys.argv[2:]:
        break_the_release()
    asyncio.run(serve(sys.argv[1]))
