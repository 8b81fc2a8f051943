"""Request counts for the autoscaler: per (run id, unix second), written to the store in batches.

Counting is a dict increment on the request's path; a background task adds the counts to the store every
`flush_interval` (in a thread), or at once when a request is held for a service with no ready replica,
so that the autoscaler sees demand for a service scaled to zero within about a second. Counts older than
`requests_kept_for` are pruned now and then (by every proxy: pruning is idempotent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gateway.options import GatewayOptions
from store.repository import Store

log = logging.getLogger(__name__)


class RequestStats:
    def __init__(self, store: Store, gateway_id: str, options: GatewayOptions) -> None:
        self._store = store
        self._gateway_id = gateway_id
        self._options = options
        self._counts: dict[tuple[str, int], int] = {}
        self._flush_now = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_prune = 0.0

    def count(self, run_id: str) -> None:
        key = (run_id, int(time.time()))
        self._counts[key] = self._counts.get(key, 0) + 1

    def flush_soon(self) -> None:
        self._flush_now.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="gateway-request-stats")

    async def stop(self) -> None:
        """Stops the task and writes what is left."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()

    async def flush(self) -> None:
        counts, self._counts = self._counts, {}
        if not counts:
            return
        try:
            await asyncio.to_thread(self._store.add_requests, self._gateway_id, counts)
        except Exception:
            log.exception("could not store %d request counts; will retry", len(counts))
            for key, count in counts.items():  # kept for the next flush
                self._counts[key] = self._counts.get(key, 0) + count

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._flush_now.wait(), self._options.flush_interval)
            self._flush_now.clear()
            await self.flush()
            now = time.time()
            if now - self._last_prune >= self._options.prune_interval:
                self._last_prune = now
                before = int(now - self._options.requests_kept_for)
                try:
                    await asyncio.to_thread(self._store.prune_requests, before)
                except Exception:
                    log.exception("could not prune request counts")
