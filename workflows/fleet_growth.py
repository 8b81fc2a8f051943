"""An elastic fleet's calls to its backend, as FleetWorkflow makes them (docs/backends.md#elastic-fleets).

The book says what each group is (core.fleets.provisioning); `Growth.reconcile` starts the activity each
phase needs for the groups that have none running: `create_group` for one being submitted, `start_group`
for one the backend has given, `release_group` for one given back, and one `watch_groups` over those the
backend holds. Their reports come back through the fleet's inbox as `GroupNews`. Every call is idempotent
(a group is known to the backend by the name the book gave it), so a continued-as-new fleet, or one whose
worker died, simply starts them again.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from core.backends.slurm import job_name
    from core.backends.slurm_watch import known_key
    from core.fleets.book import FleetBook, FleetInput
    from core.fleets.growth import CreateGroup, GroupCall, GroupNews, StartGroup, WatchGroups
    from core.fleets.provisioning import GroupPhase, InstanceGroup
    from workflows import activity_stubs
    from workflows.handles import abandon

# A backend that does not answer (the login node unreachable) is asked again, backing off to a minute.
_BACKEND_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    non_retryable_error_types=["NoBackend", "NoHostPool"],
)
_HEARTBEAT = timedelta(seconds=10)
_OPTIONS: dict[str, Any] = {
    "start_to_close_timeout": timedelta(minutes=5),
    "heartbeat_timeout": _HEARTBEAT,
    "retry_policy": _BACKEND_RETRY,
}

Handle = workflow.ActivityHandle[GroupNews]


class Growth:
    def __init__(self, inp: FleetInput) -> None:
        self._input = inp
        self._calls: dict[str, tuple[GroupPhase, Handle]] = {}  # group -> the call for its phase
        self._watch: workflow.ActivityHandle[list[GroupNews]] | None = None
        self._watched: dict[str, tuple[str, str]] = {}

    def _call(self, group: InstanceGroup) -> GroupCall:
        inp = self._input
        assert inp.backend is not None
        return GroupCall(
            project=inp.project,
            fleet=inp.name,
            backend=inp.backend,
            group=group.name,
            job_name=job_name(inp.project, inp.name, group.name),
        )

    def reconcile(self, book: FleetBook) -> None:
        """The calls each group's phase needs, started where none runs; stale ones let go."""
        provisioning = book.provisioning
        if provisioning is None:
            return
        groups = provisioning.groups
        for name, (phase, handle) in list(self._calls.items()):
            group = groups.get(name)
            if group is None or group.phase != phase:
                if not handle.done():
                    abandon(handle)
                del self._calls[name]
        for group in groups.values():
            if group.name in self._calls:
                continue
            started = self._start(book, group)
            if started is not None:
                self._calls[group.name] = (group.phase, started)
        self._keep_watch(book)

    def _start(self, book: FleetBook, group: InstanceGroup) -> Handle | None:
        call = self._call(group)
        configuration = self._input.configuration
        assert configuration is not None
        if group.phase == GroupPhase.SUBMITTING:
            create = CreateGroup(
                **call.model_dump(),
                nodes=group.nodes,
                resources=configuration.resources,
                spot_policy=configuration.spot_policy,
            )
            return workflow.start_activity(activity_stubs.create_group, create, **_OPTIONS)
        if group.phase == GroupPhase.STARTING and group.backend_id is not None:
            start = StartGroup(
                **call.model_dump(),
                backend_id=group.backend_id,
                instances=group.instances,
                blocks=configuration.blocks,
            )
            return workflow.start_activity(activity_stubs.start_group, start, **_OPTIONS)
        if group.phase == GroupPhase.RELEASING:
            return workflow.start_activity(activity_stubs.release_group, call, **_OPTIONS)
        return None

    def _keep_watch(self, book: FleetBook) -> None:
        """One watch over the groups the backend holds or gave, told what the fleet knows of each."""
        assert book.provisioning is not None
        watched = {
            group.name: (self._call(group).job_name, known_key(group))
            for group in book.provisioning.groups.values()
            if group.phase in (GroupPhase.WAITING, GroupPhase.STARTING, GroupPhase.READY)
        }
        if self._watch is not None and watched == self._watched and not self._watch.done():
            return
        if self._watch is not None and not self._watch.done():
            abandon(self._watch)
        self._watch, self._watched = None, watched
        if not watched:
            return
        inp = self._input
        assert inp.backend is not None
        self._watch = workflow.start_activity(
            activity_stubs.watch_groups,
            WatchGroups(project=inp.project, fleet=inp.name, backend=inp.backend, groups=watched),
            start_to_close_timeout=timedelta(days=365),
            heartbeat_timeout=_HEARTBEAT,
            retry_policy=_BACKEND_RETRY,
        )

    def reported(self) -> bool:
        return any(handle.done() for _, handle in self._calls.values()) or (
            self._watch is not None and self._watch.done()
        )

    def news(self) -> list[GroupNews]:
        """What the calls that ended reported (a call that failed for good: its group refused)."""
        found: list[GroupNews] = []
        for name, (phase, handle) in list(self._calls.items()):
            if not handle.done():
                continue
            del self._calls[name]
            try:
                found.append(handle.result())
            except (ActivityError, CancelledError) as err:
                if phase != GroupPhase.RELEASING:
                    found.append(GroupNews(group=name, state="refused", reason=_why(err)))
        if self._watch is not None and self._watch.done():
            watch, self._watch = self._watch, None
            with contextlib.suppress(ActivityError, CancelledError):
                found += watch.result()
        return found

    def stop(self) -> None:
        for _, handle in self._calls.values():
            if not handle.done():
                abandon(handle)
        self._calls.clear()
        if self._watch is not None and not self._watch.done():
            abandon(self._watch)
        self._watch = None


def _why(error: BaseException) -> str:
    cause = error.cause if isinstance(error, ActivityError) else None
    text = cause.message if isinstance(cause, FailureError | ApplicationError) else str(error)
    return " ".join(text.split())[:300]
