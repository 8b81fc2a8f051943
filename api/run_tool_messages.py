"""What `ferry schedule` and `ferry metrics` send and get through the API
(docs/teams.md#schedules-and-metrics); the CLI reads the same models."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from core.wire.agent_api import TaskMetrics
from store import JobSubmissionRecord, RunRecord

ScheduleAction = Literal["pause", "resume", "trigger"]


class ScheduleChange(BaseModel):
    """`POST /api/projects/{p}/runs/{name}/schedule`'s body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: ScheduleAction


class SampledJob(BaseModel):
    """One job's latest submission; a running one with what its agent measures now, or why it could not."""

    job: JobSubmissionRecord
    metrics: TaskMetrics | None = None
    unavailable: str | None = None


class RunMetrics(BaseModel):
    """`GET /api/projects/{p}/runs/{name}/metrics`: the run as it was sampled, and each of its jobs."""

    run: RunRecord
    jobs: list[SampledJob]
