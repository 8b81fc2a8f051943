"""`ferry metrics`: running jobs' CPU, memory and GPU use, asked of their agents (docs/jobs.md#metrics).

One activity asks every job's agent at once; a job whose agent cannot answer gets the reason in place of
its figures, so that one lost instance never hides the others' jobs.
"""

from __future__ import annotations

import asyncio
import time

from temporalio import activity

from activities.agent_client import AgentError, AgentUnreachable
from activities.heartbeats import heartbeating
from activities.instances import InstanceDirectory, UnknownInstance
from core.runs.utilization import kept, no_gpu_note, sample_interval, utilization_news
from core.wire import activity_names as names
from core.wire.messages import (
    GpuSample,
    JobMetrics,
    MetricsReply,
    MetricsRequest,
    TaskRef,
    UtilizationNews,
    UtilizationNewsKind,
    WatchUtilization,
)


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

    @activity.defn(name=names.WATCH_UTILIZATION)
    async def watch_utilization(self, watch: WatchUtilization) -> UtilizationNews:
        """The job's GPUs sampled every sample_interval until its utilization_policy has news for the job's
        workflow (docs/jobs.md#utilization-policy): one activity per change, not per sample. A sample the
        agent cannot give proves nothing; the job's workflow cancels this once the job stops."""
        policy, samples = watch.policy, list(watch.samples)
        async with heartbeating():
            while True:
                await asyncio.sleep(sample_interval(policy))
                answer = await self._one(watch.task)
                if answer.metrics is None:
                    continue
                if not answer.metrics.gpus:
                    return UtilizationNews(kind=UtilizationNewsKind.NO_GPUS, note=no_gpu_note(policy))
                now = time.time()
                reading = {gpu.index: gpu.utilization_percent for gpu in answer.metrics.gpus}
                samples = kept([*samples, GpuSample(at=now, utilization=reading)], policy, now)
                news = utilization_news(watch.low, samples, policy, now)
                if news is not None:
                    return news
