"""dstack's `utilization_policy`, JobWorkflow's part (docs/jobs.md#utilization-policy): while its job runs,
sample its GPUs with the agent's metrics (the activity `ferry metrics` uses), log when a GPU falls below the
threshold and when it recovers (`memo` events, before anything is done), and ask the job to stop with
TERMINATED_DUE_TO_UTILIZATION_POLICY once the window is met. The decision is core.runs.utilization's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from core.configuration.specs import UtilizationPolicy
    from core.runs.utilization import GpuSample, assess, kept, no_gpu_note, recovered_note, sample_interval
    from core.status import JobTerminationReason
    from core.wire.job_messages import TerminateJobRequest
    from core.wire.messages import MetricsRequest, TaskRef
    from workflows import activity_stubs, retry_policies

_SAMPLE_TIMEOUT = timedelta(seconds=15)
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
        """Until the window is met (the job is then asked to stop) or the job is stopped (cancelled)."""
        interval = timedelta(seconds=sample_interval(self._policy))
        request = MetricsRequest(tasks=[TaskRef(job_submission_id=self._id, instance_name=instance)])
        samples: list[GpuSample] = []
        low = False
        while True:
            await workflow.sleep(interval)
            with contextlib.suppress(ActivityError):  # no sample this time: the next one may answer
                reply = await workflow.execute_activity(
                    activity_stubs.task_metrics,
                    request,
                    start_to_close_timeout=_SAMPLE_TIMEOUT,
                    retry_policy=retry_policies.FEW_TRIES,
                )
                metrics = reply.jobs[0].metrics if reply.jobs else None
                if metrics is None:  # the agent could not say: no evidence either way
                    continue
                if not metrics.gpus:
                    self.not_applied()
                    return
                now = workflow.now().timestamp()
                reading = GpuSample(now, {gpu.index: gpu.utilization_percent for gpu in metrics.gpus})
                samples = kept([*samples, reading], self._policy, now)
                verdict = assess(samples, self._policy, now)
                if verdict.note is not None and not low:
                    self._note(**{MEMO_KEY: verdict.note})
                elif verdict.note is None and low:
                    self._note(**{MEMO_KEY: recovered_note(self._policy)})
                low = verdict.note is not None
                if verdict.breached:
                    reason = JobTerminationReason.TERMINATED_DUE_TO_UTILIZATION_POLICY
                    self._terminate(TerminateJobRequest(reason=reason, message=verdict.note))
                    return
