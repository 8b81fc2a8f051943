"""The worker as the embedded stack starts it: `python -m worker.stack_entry --ready-file FILE`.

worker.main.run_worker, plus a ready file (its pid) written once the worker polls: the stack waits for
it instead of sleeping. FERRY_TEMPORAL_ADDRESS names the stack's dev server, which may still be starting.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from pathlib import Path

from core.settings import Settings
from embedded.devserver import port_open
from worker.main import run_worker

START_TIMEOUT = 60.0


async def serve_worker(settings: Settings, ready_file: Path) -> None:
    """worker.main.run_worker once the dev server listens, and the ready file once the worker polls."""
    assert settings.temporal_address is not None
    port = int(settings.temporal_address.rsplit(":", 1)[1])
    deadline = time.monotonic() + START_TIMEOUT
    while not port_open(port):  # the dev server was started a moment ago
        if time.monotonic() > deadline:
            raise RuntimeError(f"no Temporal server at {settings.temporal_address}")
        await asyncio.sleep(0.02)
    await run_worker(settings, on_ready=lambda: ready_file.write_text(str(os.getpid())), embedded=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m worker.stack_entry", description=__doc__)
    parser.add_argument("--ready-file", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve_worker(Settings.from_env(), args.ready_file))


if __name__ == "__main__":
    main()
