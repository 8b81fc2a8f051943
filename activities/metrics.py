"""`ferry metrics`: running jobs' CPU, memory and GPU use, asked of their agents (docs/jobs.md#metrics).

One activity asks every job's agent at once; a job whose agent cannot answer gets the reason in place of
its figures, so that one lost instance never hides the others' jobs.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from activities.agent_client import AgentError, AgentUnreachable
from activities.instances import InstanceDirectory, UnknownInstance
from core.wire import activity_names as names
from core.wire.messages import JobMetrics, MetricsReply, MetricsRequest, TaskRef


class MetricsActivities:
    def __init__(self, instances: InstanceDirectory) -> None:
        self._instances = instances

    @activity.defn(name=names.TASK_METRICS)
    async def task_metrics(self, request: MetricsRequest) -> MetricsReply:
        """Each task's metrics as its agent samples them now (it reads only: safe to run again)."""
        return MetricsReply(jobs=list(await asyncio.gather(*(self._one(task) for task in request.tasks))))

    async def _one(self, task: TaskRef) -> JobMetrics:
        try:
            client = await self._instances.resolve(task.instance_name)
            metrics = await client.task_metrics(task.job_submission_id)
        except AgentError as err:  # 404: removed; 409: no longer running
            return JobMetrics(job_submission_id=task.job_submission_id, unavailable=err.message)
        except (AgentUnreachable, UnknownInstance, OSError) as err:
            return JobMetrics(job_submission_id=task.job_submission_id, unavailable=str(err))
        return JobMetrics(job_submission_id=task.job_submission_id, metrics=metrics)
