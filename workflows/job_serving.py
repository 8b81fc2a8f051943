"""A service replica's part of its JobWorkflow (docs/services.md): registered and probed while its job
runs, drained before its job is stopped, unregistered once it has ended.

The proxies route only to replicas the store says are ready; these activities keep that record. Each
readiness change is logged on the job (a `memo` event) and sent to the run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from core.jobs.phases import JobControl
    from core.wire.job_messages import JobInput
    from core.wire.services import DrainReplica, ProbeReplica, ReplicaReadiness, ReplicaState
    from workflows import activity_stubs, retry_policies

_HEARTBEAT = timedelta(seconds=10)
_DRAIN_MARGIN = timedelta(seconds=30)

Note = Callable[..., None]  # logs a memo on the job and sends its news


class ReplicaServing:
    def __init__(self, inp: JobInput, job_id: str, control: Callable[[], JobControl], note: Note) -> None:
        assert inp.service is not None
        self._inp = inp
        self._service = inp.service
        self._id = job_id
        self._control = control
        self._note = note
        self._probing: asyncio.Task[None] | None = None
        self.registered = False

    def start(self, instance: str) -> None:
        """Register the replica and follow its probes, until `stop_probing`."""
        self._probing = asyncio.ensure_future(self._follow_probes(instance))

    async def _follow_probes(self, instance: str) -> None:
        # Cancelled by `stop_probing`: the probe activity's cancellation is its normal end.
        with contextlib.suppress(ActivityError, CancelledError, asyncio.CancelledError):
            await self._probe(instance)

    async def _probe(self, instance: str) -> None:
        known = ReplicaState.PROBING
        self.registered = True
        while True:
            request = ProbeReplica(
                job_submission_id=self._id,
                run_id=self._inp.run_id,
                instance_name=instance,
                replica_num=self._inp.replica_num,
                submission_num=self._inp.submission_num,
                service=self._service,
                known=known,
            )
            readiness: ReplicaReadiness = await workflow.execute_activity(
                activity_stubs.probe_replica,
                request,
                start_to_close_timeout=timedelta(days=365),
                heartbeat_timeout=_HEARTBEAT,
                retry_policy=retry_policies.QUICK,
                # Stopping the probes asks nothing of the server (a cancel request racing the probe's own
                # end fails the workflow task): the activity ends once the replica is draining or gone.
                cancellation_type=workflow.ActivityCancellationType.ABANDON,
            )
            known = readiness.state
            self._note(serving=known.value, probes=readiness.detail)

    def stop_probing(self) -> None:
        if self._probing is not None:
            self._probing.cancel()
            self._probing = None

    async def drain(self, grace: float) -> None:
        """No new requests; those in flight finish, up to `grace` seconds (none for an abort)."""
        self.stop_probing()
        if not self.registered or grace <= 0:
            return
        handle = workflow.start_activity(
            activity_stubs.drain_replica,
            DrainReplica(job_submission_id=self._id, grace=grace),
            start_to_close_timeout=timedelta(seconds=grace) + _DRAIN_MARGIN,
            heartbeat_timeout=_HEARTBEAT,
            retry_policy=retry_policies.QUICK,
        )
        # An abort, or the instance lost, during the drain: stop waiting for it.
        await workflow.wait_condition(lambda: handle.done() or self._cut_short())
        if not handle.done():
            handle.cancel()
            return
        try:
            result = handle.result()
        except ActivityError:
            return
        if result.drained:
            self._note(serving=ReplicaState.DRAINING.value, drained=f"in {result.waited:.2f}s")
        else:
            pending = ", ".join(result.pending)
            self._note(serving=ReplicaState.DRAINING.value, drained=f"not within {grace:g}s ({pending})")

    def _cut_short(self) -> bool:
        control = self._control()
        return control.lost or (control.terminate is not None and control.terminate.abort)

    async def unregister(self) -> None:
        self.stop_probing()
        if not self.registered:
            return
        with contextlib.suppress(ActivityError, CancelledError):
            await workflow.execute_activity(
                activity_stubs.unregister_replica,
                self._id,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=retry_policies.REMOVE,
            )
