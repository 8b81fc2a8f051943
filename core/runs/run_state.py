"""What a run's eventlog says about it: its latest job submissions and its own state (the fold is
core.runs.state_machine's)."""

from __future__ import annotations

import bisect
import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.eventlog import ExceptionRecord
from core.runs.derivation import JobView
from core.runs.retry import Run, remember_run, retry_window_start
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason


class RunJob(BaseModel):
    """The latest submission of one (replica, job) of a run, as the run's log tells it."""

    model_config = ConfigDict(frozen=True)

    replica_num: int
    job_num: int
    submission_num: int
    status: JobStatus = JobStatus.SUBMITTED
    termination_reason: JobTerminationReason | None = None
    exit_status: int | None = None
    first_submitted_at: float  # of submission 0
    submitted_at: float  # of this submission
    provisioned: bool = False  # this submission has held an instance
    last_provisioned_at: float | None = None  # last event while any submission held one; see JobView
    running_at: float | None = None  # when this submission was first RUNNING
    deployment: int = 0  # the run's deployment this submission runs (a service re-applied in place)
    serving: str | None = None  # a service replica's state in the proxies (ready, unready, ...)
    group: str | None = None  # a service's replica group (None: a service without groups, any other run)

    def view(self, history: RetryHistory | None = None) -> JobView:
        return JobView(
            replica_num=self.replica_num,
            job_num=self.job_num,
            submission_num=self.submission_num,
            status=self.status,
            termination_reason=self.termination_reason,
            exit_status=self.exit_status,
            first_submitted_at=self.first_submitted_at,
            last_provisioned_at=self.last_provisioned_at,
            running_at=self.running_at,
            first_window=None if history is None else history.first_window,
            runs=() if history is None else history.runs,
        )


class RetryHistory(BaseModel):
    """What the earlier submissions of one (replica, job), in the run's current cycle, tell its retry
    window (core.runs.retry.RetryClock): the window its first failure opened, and the submissions that
    ran. Kept beside the jobs, not in RunJob, which is the latest submission only."""

    model_config = ConfigDict(frozen=True)

    replica_num: int
    job_num: int
    first_window: float | None = None
    runs: tuple[Run, ...] = ()


def job_key(job: RunJob) -> tuple[int, int]:
    """The order of a run's jobs (`RunState.jobs`): by replica, then job."""
    return job.replica_num, job.job_num


class RunState(BaseModel):
    """What a run's eventlog says about it."""

    model_config = ConfigDict(frozen=True)

    run_name: str
    project: str
    user: str
    run_type: str
    status: RunStatus
    termination_reason: RunTerminationReason | None = None
    times: dict[RunStatus, float] = Field(default_factory=dict)  # first time each status was entered
    status_since: float  # when the current status was entered this time
    jobs: tuple[RunJob, ...] = ()  # sorted by (replica, job)
    retry_history: tuple[RetryHistory, ...] = ()  # of jobs resubmitted in this cycle, sorted likewise
    submissions: int = 0  # job-submit events, first submissions included
    retries: int = 0  # retry events
    retry_attempt: int | None = None  # `attempt` of the latest retry
    exceptions: tuple[ExceptionRecord, ...] = ()
    priority: int | None = None
    memo: dict[str, Any] = Field(default_factory=dict)
    replicas: int | None = None  # the autoscaler's latest count (None: the count the run started with)
    group_replicas: dict[str, int] = Field(default_factory=dict)  # the same, per replica group
    group_scaled_at: dict[str, float] = Field(default_factory=dict)
    deployment: int = 0  # deploy events: a service's configuration re-applied in place
    scaled_at: float | None = None  # when it was decided
    # A scheduled run (docs/schedules.md): its cycles, the current one's start and cycle workflow, and
    # when its schedule fires next while it waits in PENDING.
    cycle: int = 0  # cycle events; 0: no cycle has begun
    cycle_started_at: float | None = None
    cycle_workflow_id: str | None = None  # the schedule's workflow for the current cycle, told at its end
    next_at: float | None = None
    cycles_skipped: int = 0
    last_cycle: str | None = None  # how the latest cycle ended: its run status, e.g. "done" or "failed"
    # A run that waits for others (docs/dependencies.md): the dependencies not met yet, as NAME:condition.
    waiting_for: tuple[str, ...] = ()
    # A pipeline (docs/pipelines.md): its running (or last) task, 1-based, of how many, and that task's run.
    task: int = 0
    tasks: int = 0
    task_run_id: str | None = None

    def job(self, replica_num: int, job_num: int) -> RunJob | None:
        """By bisection over the sorted jobs: an array's thousand elements are looked up at every news."""
        at = bisect.bisect_left(self.jobs, (replica_num, job_num), key=job_key)
        if at < len(self.jobs) and job_key(self.jobs[at]) == (replica_num, job_num):
            return self.jobs[at]
        return None

    def history(self, replica_num: int, job_num: int) -> RetryHistory | None:
        key = (replica_num, job_num)
        return next((h for h in self.retry_history if (h.replica_num, h.job_num) == key), None)

    def scaled_count(self, group: str | None) -> int | None:
        """The autoscaler's latest count for a replica group (None: the single form); None: never scaled."""
        return self.replicas if group is None else self.group_replicas.get(group)

    def last_scaled_at(self, group: str | None) -> float | None:
        return self.scaled_at if group is None else self.group_scaled_at.get(group)

    def after_submission(self, previous: RunJob, now: float, *, new_cycle: bool) -> RunState:
        """The retry history once `previous` has a new submission, at `now`: the window its failure
        opened, if it is the job's first failure, and its run, if it ran (core.runs.retry.RetryClock),
        which ended when it last held its instance, or now if it still does (a node whose replica is
        resubmitted before its stop is heard). A new cycle of a scheduled run starts without any."""
        key = (previous.replica_num, previous.job_num)
        others = [h for h in self.retry_history if (h.replica_num, h.job_num) != key]
        if new_cycle:
            return self.model_copy(update={"retry_history": tuple(others)})
        history = self.history(*key) or RetryHistory(replica_num=key[0], job_num=key[1])
        first_window, runs = history.first_window, history.runs
        reason = previous.termination_reason
        if first_window is None and reason is not None and reason.to_retry_event() is not None:
            first, last = previous.first_submitted_at, previous.last_provisioned_at
            first_window = retry_window_start(first_submitted_at=first, last_provisioned_at=last)
        if previous.running_at is not None:
            ended = previous.last_provisioned_at if previous.status.is_finished() else now
            ended = now if ended is None else ended
            runs = remember_run(runs, ended - previous.running_at, ended)
        new = history.model_copy(update={"first_window": first_window, "runs": runs})
        histories = sorted([*others, new], key=lambda h: (h.replica_num, h.job_num))
        return self.model_copy(update={"retry_history": tuple(histories)})

    def job_views(self) -> list[JobView]:
        """The input `derive_run_status` needs: the latest submission of every job."""
        if not self.retry_history:
            return [_plain_view(j) for j in self.jobs]
        histories = {(h.replica_num, h.job_num): h for h in self.retry_history}
        return [
            j.view(histories[job_key(j)]) if job_key(j) in histories else _plain_view(j) for j in self.jobs
        ]


@functools.lru_cache(maxsize=4096)
def _plain_view(job: RunJob) -> JobView:
    """A job's view without a retry history, by its value (RunJob is frozen): a run's state is folded anew
    at each event, and most of its jobs are the same as before it, so an array's thousand views are made
    once each, not at every news of every element."""
    return job.view(None)
