"""How FleetWorkflow keeps the store's view of its instances (`ferry fleet list`) and of its queue (`ferry
ps`: waiting for capacity) up to date: one write (an activity) at a time, when the instances or their
statuses change; a change of their load or of the queue alone (every placement and release) is written at
most every RECORD_EVERY (docs/fleets.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from core.fleets.messages import InstanceView, RecordFleet
    from workflows import activity_stubs, retry_policies

RECORD_EVERY = timedelta(seconds=2)

# The fleet's status, its instances, the jobs in its queue (None: a fleet that tells them instead).
View = tuple[str, list[InstanceView], list[str] | None, dict[str, str]]


class FleetRecordWriter:
    def __init__(self, project: str, fleet: str, current: Callable[[], View]) -> None:
        self._project = project
        self._fleet = fleet
        self._current = current
        self._writing: workflow.ActivityHandle[None] | None = None
        self._written: View | None = None
        self._written_at = 0.0
        self._wake: asyncio.Future[None] | None = None

    def write(self) -> None:
        """The current view written if it is due; if only the load changed, a durable timer wakes the
        workflow when it will be."""
        if not self.due():
            waking = self._wake is not None and not self._wake.done()
            if self._only_load_changed() and not waking:
                left = self._written_at + RECORD_EVERY.total_seconds() - workflow.now().timestamp()
                self._wake = asyncio.ensure_future(asyncio.sleep(max(left, 0)))  # a durable timer
            return
        self._wake = None
        current = self._current()
        self._written, self._written_at = current, workflow.now().timestamp()
        status, views, waiting, why = current
        record = RecordFleet(
            project=self._project, fleet=self._fleet, status=status, instances=views, waiting=waiting, why=why
        )
        self._writing = workflow.start_activity(
            activity_stubs.record_fleet,
            record,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=retry_policies.QUICK,
        )

    def due(self) -> bool:
        if self._writing is not None and not self._writing.done():
            return False
        if self._current() == self._written:
            return False
        waited = workflow.now().timestamp() - self._written_at >= RECORD_EVERY.total_seconds()
        return waited or not self._only_load_changed()

    async def settle(self) -> None:
        """The write in flight done (before the workflow ends or continues as new)."""
        if self._writing is not None:
            with contextlib.suppress(ActivityError):
                await self._writing

    def _only_load_changed(self) -> bool:
        """Since the last write, the instances and their statuses are the same: only their load (or the
        queue) changed."""
        if self._written is None:
            return False
        (status, views, *_), (was, before, *_) = self._current(), self._written
        return (status, [(v.name, v.status) for v in views]) == (was, [(v.name, v.status) for v in before])
