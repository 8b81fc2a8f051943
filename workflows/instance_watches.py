"""A fleet's instance watches: one long-lived activity per instance (docs/jobs.md#the-instance-watch).

Each follows every task of the fleet's project on its instance through the agent's change feed, stores
their logs and tells each job's workflow when its task has ended. It runs while the instance holds jobs
(from the step that places the first to the one that releases the last). A watch heartbeats, so a worker
that dies hands it to another within the heartbeat timeout; it is started again if it ever ends.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.wire.messages import WatchInstance
    from workflows import activity_stubs, retry_policies
    from workflows.handles import abandon, settle

# The SDK sends heartbeats at most every 0.8 x this: a watch whose worker died moves to another within it.
_WATCH_HEARTBEAT = timedelta(seconds=10)


class InstanceWatches:
    def __init__(self, owners: str, unreachable_after: float | None = None) -> None:
        self._owners = owners  # the workflow id prefix of the fleet's project: its jobs
        # None: the watch's own default. A fleet with `nodes` gives a long one: its backend says when an
        # instance is gone, and a silent login node is no reason to fail a job (docs/backends.md).
        self._unreachable_after = unreachable_after
        self._handles: dict[str, workflow.ActivityHandle[None]] = {}

    def keep(self, instances: list[str]) -> None:
        """One watch running per instance named, none for the others."""
        for name in [n for n in self._handles if n not in instances]:
            abandon(self._handles.pop(name))
        for name in instances:
            handle = self._handles.get(name)
            if handle is not None and handle.done():
                settle(handle)
            if handle is None or handle.done():
                self._handles[name] = workflow.start_activity(
                    activity_stubs.watch_instance,
                    WatchInstance(instance_name=name, owners=self._owners)
                    if self._unreachable_after is None
                    else WatchInstance(
                        instance_name=name, owners=self._owners, unreachable_after=self._unreachable_after
                    ),
                    start_to_close_timeout=timedelta(days=365),
                    heartbeat_timeout=_WATCH_HEARTBEAT,
                    retry_policy=retry_policies.QUICK,
                )

    def any_ended(self) -> bool:
        """A watch ended (it should not): `keep` starts it again."""
        return any(handle.done() for handle in self._handles.values())

    def stop(self) -> None:
        """Before the fleet ends or continues as new (the next run starts its own)."""
        for handle in self._handles.values():
            abandon(handle)
        self._handles = {}
