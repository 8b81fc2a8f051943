"""How FleetWorkflow tells its jobs of its notices (`placed`, `queued`, `placement_refused`, `terminate`):
by one local activity per step since the patch `local-hot-path` (workflows/signals.py), and the ways of
the histories begun before (docs/fleets.md#the-workflow-and-its-book). A notice that cannot be delivered
(its job has ended, or never was) comes back to the fleet's inbox as `Undelivered`."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.fleets.messages import Notice, NoticeKind, Undelivered
    from core.wire.base import Message
    from core.wire.job_messages import PlacementRefused, Queued, TerminateJobRequest
    from workflows import signals


class NoticeSender:
    def __init__(self, inbox: list[Any], watching: Callable[[], bool]) -> None:
        self._inbox = inbox
        self._watching = watching  # whether the fleet watches its instances (the jobs placed hear of it)
        self._sent = 0  # by the local activity: each one's request id
        self._sending: dict[str, asyncio.Future[None]] = {}  # by JobWorkflow id: its last signal on the way

    @property
    def in_flight(self) -> bool:
        """Signals sent the way before `local-hot-path` and not yet delivered (or come back)."""
        return bool(self._sending)

    async def send_locally(self, notices: list[Notice]) -> None:
        """All of a step's signals by one local activity, one job's in order."""
        sent = []
        for notice in notices:
            self._sent += 1
            name, arg = self.message(notice)
            sent.append(signals.signal(notice.workflow_id, name, arg, str(self._sent)))
        delivered = await signals.send(*sent)
        for notice, ok in zip(notices, delivered, strict=True):
            if not ok:  # the book takes back what it gave the job
                self._inbox.append(Undelivered(notice=notice))

    def send_unblocked(self, notices: list[Notice]) -> None:
        """Before `local-hot-path`: each signal sent by the workflow, the step going on meanwhile."""
        for notice in notices:
            before = self._sending.get(notice.workflow_id)
            sending = asyncio.ensure_future(self._deliver(notice, before))
            self._sending[notice.workflow_id] = sending
            sending.add_done_callback(functools.partial(self._delivered, notice.workflow_id))

    async def _deliver(self, notice: Notice, before: asyncio.Future[None] | None) -> None:
        if before is not None:
            await before  # never raises: an earlier _deliver to the same job
        try:
            await self.signal(notice)
        except Exception:  # the job has ended (or never was): the book takes back what it gave it
            self._inbox.append(Undelivered(notice=notice))

    def _delivered(self, workflow_id: str, done: asyncio.Future[None]) -> None:
        if self._sending.get(workflow_id) is done:
            del self._sending[workflow_id]

    async def signal(self, notice: Notice) -> None:
        """The notice sent by the workflow itself (the histories begun before `local-hot-path`)."""
        name, arg = self.message(notice)
        await workflow.get_external_workflow_handle(notice.workflow_id).signal(name, arg)

    def message(self, notice: Notice) -> tuple[str, Message]:
        """The signal that tells a job of `notice`: its name and argument."""
        if notice.kind == NoticeKind.PLACED:
            assert notice.placement is not None  # a PLACED notice carries one
            return notice.kind.value, notice.placement.model_copy(update={"watched": self._watching()})
        if notice.kind == NoticeKind.REFUSED:
            return notice.kind.value, PlacementRefused(reason=notice.message or "no capacity")
        if notice.kind == NoticeKind.QUEUED:
            return notice.kind.value, Queued(position=notice.position or 0)
        return notice.kind.value, TerminateJobRequest(
            reason=notice.reason, message=notice.message, instance_gone=notice.instance_gone
        )
