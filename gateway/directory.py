"""The directory: keeps the routing table in step with the store, and this proxy's heartbeat in the store.

Every `refresh_interval` (0.1 s) a thread reads the active service runs and every registered replica and,
when anything changed, builds a new RoutingTable that the event loop swaps in whole. Requests only ever
read `directory.table`; a request held for a service without a ready replica waits on `wait_for_ready`,
which wakes as soon as a table with a ready replica (or without the service) is swapped in.

A replica behind a backend's login node is routed through this proxy's tunnel to it, once open
(gateway.tunnels: docs/services.md#replicas-behind-a-login-node).

Every `heartbeat_interval` (1 s) it records the proxy (id, public URL) with `gateway_seen`: workers
draining a replica wait for the proxies seen lately; `stop` removes the record. A store that cannot be
read leaves the last table in place: the proxy keeps routing to what it knew.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.draining import Drainer
from gateway.options import GatewayOptions
from gateway.routing_table import RoutingTable, ServiceKey, SettingsCache, build_table, rows_signature
from gateway.tunnels import ReplicaTunnels
from store.models import GatewayRecord, RunRecord, ServiceReplicaRecord
from store.repository import Store

log = logging.getLogger(__name__)


class Directory:
    def __init__(
        self,
        store: Store,
        gateway_id: str,
        public_url: str,
        options: GatewayOptions,
        drainer: Drainer,
        tunnels: ReplicaTunnels | None = None,
    ) -> None:
        self.table = RoutingTable()
        self.tunnels = tunnels or ReplicaTunnels.for_store(store)
        self._store = store
        self._gateway_id = gateway_id
        self._public_url = public_url
        self._options = options
        self._drainer = drainer
        self._settings = SettingsCache()  # used by the refresh thread only (one refresh at a time)
        self._signature: tuple[Any, ...] | None = None
        self._waiters: dict[ServiceKey, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._started_at = time.time()
        self._closing = False

    async def start(self) -> None:
        """Reads the table once (so the first requests find their services), then keeps it fresh."""
        await self.refresh()
        await asyncio.to_thread(self._heartbeat)
        self._tasks = [
            asyncio.create_task(self._every(self._options.refresh_interval, self.refresh), name="refresh"),
            asyncio.create_task(self._every(self._options.heartbeat_interval, self._beat), name="heartbeat"),
        ]

    async def stop(self) -> None:
        """Stops refreshing and removes this proxy from the store (with its drain marks)."""
        self.close_waiters()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.tunnels.aclose()
        try:
            await asyncio.to_thread(self._store.remove_gateway, self._gateway_id)
        except Exception:
            log.exception("could not remove this proxy (%s) from the store", self._gateway_id)

    def close_waiters(self) -> None:
        """Wakes every held request for good (shutting down): `wait_for_ready` no longer waits."""
        self._closing = True
        for event in self._waiters.values():
            event.set()
        self._waiters.clear()

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def holding(self) -> bool:
        """Whether a request is held for some service (read by tests and what waits on them)."""
        return bool(self._waiters)

    async def wait_for_ready(self, key: ServiceKey, timeout: float) -> None:
        """Returns once the table has a ready replica for the service or no longer has it, or after
        `timeout` seconds, whichever comes first; the caller looks at the table again."""
        if self._closing or timeout <= 0:
            return
        event = self._waiters.get(key)
        if event is None:
            event = self._waiters[key] = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    async def refresh(self) -> None:
        runs, rows = await asyncio.to_thread(self._read)
        replicas = await self.tunnels.follow(rows)
        signature = rows_signature(runs, replicas)
        if signature != self._signature:
            self._swap(await asyncio.to_thread(build_table, runs, replicas, self._settings))
            self._signature = signature
        self._drainer.table_changed(self.table)

    def _read(self) -> tuple[list[RunRecord], list[ServiceReplicaRecord]]:
        """The active service runs and every registered replica (in a thread)."""
        return self._store.active_services(), self._store.list_service_replicas()

    def _swap(self, table: RoutingTable) -> None:
        self.table = table
        for key, event in list(self._waiters.items()):
            service = table.services.get(key)
            if service is None or service.ready:
                event.set()
                del self._waiters[key]

    def _heartbeat(self) -> None:
        record = GatewayRecord(
            id=self._gateway_id, url=self._public_url, started_at=self._started_at, seen_at=time.time()
        )
        self._store.gateway_seen(record)

    async def _beat(self) -> None:
        await asyncio.to_thread(self._heartbeat)

    async def _every(self, interval: float, step: Callable[[], Awaitable[None]]) -> None:
        failing = False
        while True:
            await asyncio.sleep(interval)
            try:
                await step()
            except Exception:
                if not failing:  # one traceback per outage, not one every tenth of a second
                    log.exception("gateway: %s failed; retrying every %s s", step.__name__, interval)
                failing = True
            else:
                if failing:
                    log.warning("gateway: %s works again", step.__name__)
                failing = False
