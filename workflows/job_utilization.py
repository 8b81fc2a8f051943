"""dstack's `utilization_policy`, JobWorkflow's part (docs/jobs.md#utilization-policy): while its job runs,
its GPUs are sampled by the `watch_utilization` activity (the agent's metrics, as `ferry metrics`), which
returns only with news: a GPU fallen below the threshold, recovered (each a `memo` event, before anything is
done), or below for the whole window, when the job is asked to stop with
TERMINATED_DUE_TO_UTILIZATION_POLICY. The decision is core.runs.utilization's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.configuration.specs import UtilizationPolicy
    from core.runs.utilization import no_gpu_note
    from core.status import JobTerminationReason
    from core.wire.job_messages import TerminateJobRequest
    from core.wire.messages import TaskRef, UtilizationNewsKind, WatchUtilization
    from workflows import activity_stubs, retry_policies

# The activity samples for as long as the job runs; past this a new attempt carries on (a window restarts).
_WATCH_LIMIT = timedelta(days=1)
_HEARTBEAT = timedelta(seconds=30)
MEMO_KEY = "gpu_utilization"

Note = Callable[..., None]  # logs a memo on the job and sends its news
Terminate = Callable[[TerminateJobRequest], None]


class UtilizationWatch:
    def __init__(self, job_id: str, policy: UtilizationPolicy, note: Note, terminate: Terminate) -> None:
        self._id = job_id
        self._policy = policy
        self._note = note
        self._terminate = terminate

    def not_applied(self) -> None:
        """A job without GPUs: the policy looks at GPUs only (as dstack's), said once."""
        self._note(**{MEMO_KEY: no_gpu_note(self._policy)})

    async def run(self, instance: str) -> None:
        """Until the window is met (the job is then asked to stop) or the job is stopped (cancelled): one
        long activity per change (`watch_utilization` samples; its news is logged before anything is done)."""
        watch = WatchUtilization(
            task=TaskRef(job_submission_id=self._id, instance_name=instance), policy=self._policy
        )
        while True:
            news = await workflow.execute_activity(
                activity_stubs.watch_utilization,
                watch,
                start_to_close_timeout=_WATCH_LIMIT,
                heartbeat_timeout=_HEARTBEAT,
                retry_policy=retry_policies.QUICK,
            )
            self._note(**{MEMO_KEY: news.note})
            if news.kind == UtilizationNewsKind.NO_GPUS:
                return
            if news.kind == UtilizationNewsKind.BREACHED:
                reason = JobTerminationReason.TERMINATED_DUE_TO_UTILIZATION_POLICY
                self._terminate(TerminateJobRequest(reason=reason, message=news.note))
                return
            low = news.kind == UtilizationNewsKind.BELOW
            watch = watch.model_copy(update={"low": low, "samples": news.samples})
