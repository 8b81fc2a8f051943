"""This proxy's word that a draining replica may be stopped: `mark_drained`, once, when it is idle here.

A worker drains a replica before stopping its job: it sets the replica's state to `draining` and waits
until every live proxy has marked it drained (activities.services.drain_replica). A draining replica is
never picked for a new request (it is not in the table's `ready`), so once this proxy's in-flight count
for it is zero it stays zero, and the mark is written; a request in flight keeps the mark back until it
ends (the balancer calls `replica_idle`), so no request is cut.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.balancer import Balancer
from gateway.routing_table import RoutingTable
from store.repository import Store

log = logging.getLogger(__name__)


class Drainer:
    def __init__(self, store: Store, gateway_id: str, balancer: Balancer) -> None:
        self._store = store
        self._gateway_id = gateway_id
        self._balancer = balancer
        self._draining: frozenset[str] = frozenset()
        self._marked: set[str] = set()
        self._marking: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        balancer.on_idle = self.replica_idle

    def table_changed(self, table: RoutingTable) -> None:
        """Marks the idle replicas among the table's draining ones (called as each table is swapped in)."""
        self._draining = table.draining
        self._marked &= table.draining  # forgotten once gone (or no longer draining)
        for replica_id in table.draining:
            self.replica_idle(replica_id)

    def replica_idle(self, replica_id: str) -> None:
        if (
            replica_id not in self._draining
            or replica_id in self._marked
            or replica_id in self._marking
            or self._balancer.in_flight(replica_id)
        ):
            return
        self._marking.add(replica_id)
        task = asyncio.get_running_loop().create_task(self._mark(replica_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _mark(self, replica_id: str) -> None:
        try:
            await asyncio.to_thread(self._store.mark_drained, replica_id, self._gateway_id)
        except Exception:
            log.exception("could not mark replica %s drained; will retry", replica_id)
        else:
            if replica_id in self._draining:
                self._marked.add(replica_id)
        finally:
            self._marking.discard(replica_id)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
