"""A service's load watches (docs/services.md#autoscaling): one per replica group that autoscales, in
flight while the run serves (or is scaled to zero), asked about the count the group keeps now; a new
count or a stop replaces or ends it. Their answers wait in `changes` for the run's next step.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from core.runs.machine import RunMachine
    from core.runs.scaling import SCALES_IN
    from core.wire.services import LoadChange, WatchLoad
    from workflows import activity_stubs, retry_policies


class LoadWatches:
    def __init__(self, run_id: str) -> None:
        self._run_id = run_id
        self.changes: list[LoadChange] = []  # the watches' answers, not yet acted on
        self._tasks: dict[str | None, asyncio.Task[None]] = {}
        self._asked: dict[str | None, WatchLoad] = {}  # what each watch in flight was asked

    def take(self) -> list[LoadChange]:
        changes, self.changes = self.changes, []
        return changes

    def follow(self, machine: RunMachine, stopping: bool) -> None:
        """The watches the run needs now: started, replaced or ended to match."""
        state, plan = machine.state, machine.plan
        for group in plan.replica_groups():
            name = None if group is None else group.name
            rule = plan.scaling_rule(name)
            wanted = None
            if rule is not None and state.status in SCALES_IN and not stopping and not state.waiting_for:
                scaled = state.scaled_count(name)
                wanted = WatchLoad(
                    run_id=self._run_id,
                    rule=rule,
                    current=scaled if scaled is not None else plan.starting_count(name),
                    last_change_at=state.last_scaled_at(name) or plan.submitted_at,
                )
            if wanted == self._asked.get(name):
                continue
            running = self._tasks.pop(name, None)
            if running is not None:
                running.cancel()
            self._asked.pop(name, None)
            if wanted is not None:
                self._asked[name] = wanted
                self._tasks[name] = asyncio.ensure_future(self._watch(name, wanted))

    async def _watch(self, group: str | None, request: WatchLoad) -> None:
        try:
            change: LoadChange = await workflow.execute_activity(
                activity_stubs.watch_load,
                request,
                start_to_close_timeout=timedelta(days=365),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=retry_policies.QUICK,
            )
        except (ActivityError, asyncio.CancelledError):
            return
        if self._asked.get(group) == request:
            self.changes.append(change.model_copy(update={"group": group}))
            del self._asked[group], self._tasks[group]
