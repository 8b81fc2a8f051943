"""MetricsWorkflow: one sample of a run's running jobs (`ferry metrics`, docs/jobs.md#metrics).

The CLI has no way to an agent but the worker's (its address and token stay there), and a job's own
workflow would grow by an update and an activity at every ask of `ferry metrics -w`: each sample is a
short workflow of its own instead, one activity long.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.wire.messages import MetricsReply, MetricsRequest
    from workflows import activity_stubs, retry_policies

# An agent answers within a second; one that cannot is reported by the activity, not waited for.
SAMPLE_TIMEOUT = timedelta(seconds=15)


@workflow.defn
class MetricsWorkflow:
    @workflow.run
    async def run(self, request: MetricsRequest) -> MetricsReply:
        return await workflow.execute_activity(
            activity_stubs.task_metrics,
            request,
            start_to_close_timeout=SAMPLE_TIMEOUT,
            retry_policy=retry_policies.FEW_TRIES,  # a worker lost mid-sample: try again
        )
