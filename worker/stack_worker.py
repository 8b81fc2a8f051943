"""The embedded stack's worker: `python -m worker.stack_worker --ready-file FILE`.

worker.main.run_worker, plus a ready file (its pid) written once the worker polls: the stack waits for
it instead of sleeping. FERRY_TEMPORAL_ADDRESS names the stack's dev server, which may still be starting.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import time
from pathlib import Path

from core.settings import Settings
from store import open_store
from worker.devserver import port_open
from worker.main import build_worker, local_instances
from worker.temporal import connect_from_settings

START_TIMEOUT = 60.0


async def serve_worker(settings: Settings, ready_file: Path) -> None:
    """worker.main.run_worker, plus the ready file once the worker polls."""
    assert settings.temporal_address is not None
    port = int(settings.temporal_address.rsplit(":", 1)[1])
    deadline = time.monotonic() + START_TIMEOUT
    while not port_open(port):  # the dev server was started a moment ago
        if time.monotonic() > deadline:
            raise RuntimeError(f"no Temporal server at {settings.temporal_address}")
        await asyncio.sleep(0.02)
    client = await connect_from_settings(settings)
    store = open_store(settings.database_url)
    instances = await asyncio.to_thread(local_instances, settings)
    worker = build_worker(client, instances, store, sandboxed=settings.workflow_sandbox)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with worker:
        ready_file.write_text(str(os.getpid()))
        await stop.wait()
    await instances.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m worker.stack_worker", description=__doc__)
    parser.add_argument("--ready-file", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve_worker(Settings.from_env(), args.ready_file))


if __name__ == "__main__":
    main()
