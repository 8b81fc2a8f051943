"""A run's schedule and metrics as `ferry schedule` and `ferry metrics` reach them
(docs/teams.md#schedules-and-metrics): through Ferry's API as the logged-in user (`RemoteRunTools`), or over
the store and a Temporal client (`StoreRunTools`): the API's routes (api/run_tools_routes.py), and an
operator's CLI with Temporal's address and no login."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

from api.run_tool_messages import RunMetrics, SampledJob, ScheduleAction
from cli import exit_codes
from cli.errors import FerryError, RunNotFound
from cli.remote_runs import ApiSession, RunReader
from core.settings import TASK_QUEUE
from core.status import RunStatus
from store import RunRecord

if TYPE_CHECKING:
    from temporalio.client import Client

    from cli.context import Context
    from store.repository import Store

SAMPLE_TIMEOUT = timedelta(seconds=30)  # the whole sample: its workflow, the activity and every agent


class RunCannot(FerryError):
    """What the run cannot do: a schedule it has not (any more), a sample its agents did not give: exit 1."""

    exit_code = exit_codes.FAILED


class RunTools(Protocol):
    project: str

    async def schedule(self, run_name: str, action: ScheduleAction) -> None: ...
    async def metrics(self, ref: str, *, by_id: bool = False) -> RunMetrics: ...
    async def get_run(self, run_id: str) -> RunRecord | None: ...


def run_tools(ctx: Context) -> RunTools:
    """Through the API where the CLI is logged in or on the embedded stack; an operator's CLI itself."""
    if ctx.through_api():
        return RemoteRunTools(ApiSession(), ctx.project)
    from cli.login_file import default_user

    async def connect() -> Client:
        return (await ctx.api()).client

    return StoreRunTools(ctx.store(), ctx.project, connect, user=default_user())


class RemoteRunTools:
    """Through the API (api/run_tools_routes.py)."""

    def __init__(self, session: ApiSession, project: str) -> None:
        self.session = session
        self.project = project
        self.runs = RunReader(session, project)
        self._base = f"/api/projects/{quote(project, safe='')}/runs"

    async def schedule(self, run_name: str, action: ScheduleAction) -> None:
        path = f"{self._base}/{quote(run_name, safe='')}/schedule"
        await asyncio.to_thread(self.session.request, "POST", path, json={"action": action})

    async def metrics(self, ref: str, *, by_id: bool = False) -> RunMetrics:
        path = f"{self._base}/{quote(ref, safe='')}/metrics"
        # Longer than the sample's own limit, so that its refusal is what comes back.
        wait = SAMPLE_TIMEOUT.total_seconds() + 15
        answer = await asyncio.to_thread(
            self.session.request, "GET", path, params={"by_id": by_id}, timeout=wait
        )
        return RunMetrics.model_validate(answer.json())

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await asyncio.to_thread(self.runs.get_run, run_id)


class StoreRunTools:
    """The store and a Temporal client, connected when first needed; `user` acts (the API's caller, or an
    operator's FERRY_USER) and is named in a pause's or resume's note, which the Temporal UI shows."""

    def __init__(
        self,
        store: Store,
        project: str,
        connect: Callable[[], Awaitable[Client]],
        *,
        user: str,
        task_queue: str = TASK_QUEUE,
    ) -> None:
        self.store = store
        self.project = project
        self.user = user
        self.task_queue = task_queue
        self._connect = connect

    async def schedule(self, run_name: str, action: ScheduleAction) -> None:
        """Pause, resume or trigger the run's Temporal Schedule (docs/schedules.md#the-schedule)."""
        from core.wire.workflow_ids import schedule_id

        record = await asyncio.to_thread(self.store.find_run, self.project, run_name)
        if record is None:
            raise RunNotFound(f"no run named {run_name!r} in project {self.project!r}")
        if RunStatus(record.status).is_finished():
            raise RunCannot(f"run {run_name} has finished ({record.status}): its schedule is gone")
        configuration = record.run_configuration()
        if configuration is None or configuration.schedule is None:
            raise RunCannot(f"run {run_name} has no schedule")
        client = await self._connect()
        handle = client.get_schedule_handle(schedule_id(record.workflow_id, record.id))
        note = f"ferry schedule {action} by {self.user}"
        if action == "pause":
            await handle.pause(note=note)
        elif action == "resume":
            await handle.unpause(note=note)
        else:
            await handle.trigger()

    async def metrics(self, ref: str, *, by_id: bool = False) -> RunMetrics:
        """The run's jobs sampled now (docs/jobs.md#metrics); a finished run has none to sample (USAGE)."""
        record = await asyncio.to_thread(self._run, ref, by_id)
        if RunStatus(record.status).is_finished():
            # What can never happen: a finished run's jobs have no processes left to measure.
            raise FerryError(f"run {record.run_name} has finished ({record.status}): it has no live metrics")
        return RunMetrics(run=record, jobs=await self._sample(record))

    async def get_run(self, run_id: str) -> RunRecord | None:
        found = await asyncio.to_thread(self.store.get_run, run_id)
        return found if found is not None and found.project == self.project else None

    def _run(self, ref: str, by_id: bool) -> RunRecord:
        """The latest run named `ref` in the project, or the run with this id (only that, with `by_id`)."""
        record = None if by_id else self.store.find_run(self.project, ref)
        if record is None:
            found = self.store.get_run(ref)
            record = found if found is not None and found.project == self.project else None
        if record is None:
            raise RunNotFound(f"no run named {ref!r} in project {self.project!r} (see ferry ps -a)")
        return record

    async def _sample(self, record: RunRecord) -> list[SampledJob]:
        """The latest submission of each of the run's jobs (a pipeline's current task's), the running ones
        with what their agents measure now: one MetricsWorkflow asks every running job's agent at once."""
        from temporalio.client import WorkflowFailureError

        from cli.pipeline_tasks import run_jobs, task_run
        from cli.render import latest_jobs
        from core.status import JobStatus
        from core.wire.messages import JobMetrics, MetricsReply, MetricsRequest, TaskRef
        from core.wire.workflow_ids import metrics_workflow_id
        from workflows.metrics import MetricsWorkflow

        current = await asyncio.to_thread(task_run, self.store, record, None)
        jobs = latest_jobs(await asyncio.to_thread(run_jobs, self.store, current))
        running = [job for job in jobs if job.status == JobStatus.RUNNING and job.instance_name]
        replies: dict[str, JobMetrics] = {}
        if running:
            refs = [TaskRef(job_submission_id=j.id, instance_name=j.instance_name or "") for j in running]
            client = await self._connect()
            try:
                reply: MetricsReply = await client.execute_workflow(
                    MetricsWorkflow.run,
                    MetricsRequest(tasks=refs),
                    id=metrics_workflow_id(record.workflow_id, secrets.token_hex(6)),
                    task_queue=self.task_queue,
                    execution_timeout=SAMPLE_TIMEOUT,
                )
            except WorkflowFailureError as err:  # timed out: no worker took it, or its agents did not answer
                raise RunCannot(f"run {record.run_name}: no sample of its metrics: {err.cause}") from None
            replies = {answer.job_submission_id: answer for answer in reply.jobs}
        sampled = []
        for job in jobs:
            answer = replies.get(job.id)
            if answer is None:
                sampled.append(SampledJob(job=job))
            else:
                sampled.append(SampledJob(job=job, metrics=answer.metrics, unavailable=answer.unavailable))
        return sampled
