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
    from core.fleets.messages import ELEMENTS_NOTICES, FleetNotices, Notice, NoticeKind, Undelivered
    from core.wire.base import Message
    from core.wire.job_messages import PlacementRefused, Queued, TerminateJobRequest
    from core.wire.workflow_ids import is_elements_workflow
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
        """All of a step's signals by one local activity, one job's in order; an elements workflow's in
        one signal (workflows/elements.py)."""
        sent, told = [], []
        for group in _grouped(notices):
            self._sent += 1
            name, arg = self._message_of(group)
            sent.append(signals.signal(group[0].workflow_id, name, arg, str(self._sent)))
            told.append(group)
        delivered = await signals.send(*sent)
        for group, ok in zip(told, delivered, strict=True):
            if not ok:  # the book takes back what it gave the job
                self._inbox.extend(Undelivered(notice=notice) for notice in group)

    def send_unblocked(self, notices: list[Notice]) -> None:
        """Before `local-hot-path`: each signal sent by the workflow, the step going on meanwhile."""
        for group in _grouped(notices):
            workflow_id = group[0].workflow_id
            before = self._sending.get(workflow_id)
            sending = asyncio.ensure_future(self._deliver(group, before))
            self._sending[workflow_id] = sending
            sending.add_done_callback(functools.partial(self._delivered, workflow_id))

    async def _deliver(self, group: list[Notice], before: asyncio.Future[None] | None) -> None:
        if before is not None:
            await before  # never raises: an earlier _deliver to the same job
        try:
            name, arg = self._message_of(group)
            await workflow.get_external_workflow_handle(group[0].workflow_id).signal(name, arg)
        except Exception:  # the job has ended (or never was): the book takes back what it gave it
            self._inbox.extend(Undelivered(notice=notice) for notice in group)

    def _delivered(self, workflow_id: str, done: asyncio.Future[None]) -> None:
        if self._sending.get(workflow_id) is done:
            del self._sending[workflow_id]

    async def signal(self, notice: Notice) -> None:
        """The notice sent by the workflow itself (the histories begun before `local-hot-path`)."""
        name, arg = self._message_of([notice])
        await workflow.get_external_workflow_handle(notice.workflow_id).signal(name, arg)

    def _message_of(self, group: list[Notice]) -> tuple[str, Message | FleetNotices]:
        """One job's notice, or an elements workflow's notices in one FleetNotices."""
        if len(group) == 1 and not is_elements_workflow(group[0].workflow_id):
            return self.message(group[0])
        watched = self._watching()
        return ELEMENTS_NOTICES, FleetNotices(notices=[_watched(notice, watched) for notice in group])

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


def _grouped(notices: list[Notice]) -> list[list[Notice]]:
    """Each job's notice on its own, in order; an elements workflow's together, where its first was."""
    groups: list[list[Notice]] = []
    elements: dict[str, list[Notice]] = {}
    for notice in notices:
        if not is_elements_workflow(notice.workflow_id):
            groups.append([notice])
        elif notice.workflow_id in elements:
            elements[notice.workflow_id].append(notice)
        else:
            elements[notice.workflow_id] = group = [notice]
            groups.append(group)
    return groups


def _watched(notice: Notice, watched: bool) -> Notice:
    if notice.placement is None:
        return notice
    return notice.model_copy(update={"placement": notice.placement.model_copy(update={"watched": watched})})
