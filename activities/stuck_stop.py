"""The effects of stopping a stuck run from outside (docs/upgrades.md#stopping-a-stuck-run).

Its workflows are terminated (they cannot take a stop), its tasks stopped and removed from their agents,
its volumes and service replicas freed, and its end stored as `core.runs.stuck_stop` decides. What its
workflows would have known is read where it lasts: the run's start input in its history, its jobs in the
store, its tasks on the agents of its fleets' instances (a job whose news never reached the store still
has its task there).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.agent_client import AgentClient, AgentError, AgentUnreachable
from activities.heartbeats import heartbeating
from activities.instances import InstanceDirectory
from activities.jobs import remove_task
from activities.records import store_run_changes
from core.configuration.base import DEFAULT_STOP_DURATION
from core.eventlog import Event, EventlogError
from core.runs.stuck_stop import StuckStop, end_stuck_run
from core.runs.terminating import stop_reason
from core.runs.workflow_messages import RunInput
from core.status import JobTerminationReason
from core.wire import activity_names as names
from core.wire.agent_api import TaskStatus
from core.wire.job_messages import JobInput
from core.wire.messages import RecordRun
from core.wire.run_messages import PipelineInput, StopReply
from core.wire.stuck_stop import (
    EndRunWorkflows,
    RecordStuckStop,
    RemoveRunTasks,
    RunTasksRemoved,
    RunWorkflowsEnded,
)
from core.wire.workflow_ids import LOCAL_FLEET, LOCAL_INSTANCE, job_submission_id
from store import RUN_EVENTLOG, RunRecord, Store

_INPUTS: Mapping[str, type] = {
    "RunWorkflow": RunInput,
    "PipelineWorkflow": PipelineInput,
    "JobWorkflow": JobInput,
}
_STOP_MARGIN = 30.0  # past its grace period a stopped task is killed (the agent should have done it)
_POLL = 0.2


class StuckStopActivities:
    def __init__(self, client: Client, instances: InstanceDirectory, store: Store) -> None:
        self._client = client
        self._instances = instances
        self._store = store

    @activity.defn(name=names.END_RUN_WORKFLOWS)
    async def end_run_workflows(self, request: EndRunWorkflows) -> RunWorkflowsEnded:
        """Terminate the run's workflow and every open one beside it (its jobs', a cycle's, a pipeline's
        tasks'); the run's fleets and the open jobs' own, read from their start inputs first."""
        run_id = request.run_workflow_id
        query = f"WorkflowId STARTS_WITH '{run_id}/' AND ExecutionStatus = 'Running'"
        beside = [e.id async for e in self._client.list_workflows(query) if e.id != request.keep]
        fleets: list[str] = []
        jobs: dict[str, str] = {}
        for workflow_id in [run_id, *beside]:
            found = await self._start_input(workflow_id)
            if isinstance(found, RunInput):
                fleets.append(found.fleet)
            elif isinstance(found, PipelineInput):
                fleets.extend(found.fleets)
            elif isinstance(found, JobInput):
                jobs[_job_id(found)] = found.fleet_workflow_id
        ended = [w for w in [run_id, *beside] if await self._terminate(w, request.reason)]
        return RunWorkflowsEnded(ended=ended, fleets=sorted(set(fleets)), jobs=jobs)

    async def _start_input(self, workflow_id: str) -> Any:
        """The input the workflow's current execution started with; None for a kind this does not read."""
        handle = self._client.get_workflow_handle(workflow_id)
        async for event in handle.fetch_history_events():
            started = event.workflow_execution_started_event_attributes
            kind = _INPUTS.get(started.workflow_type.name)
            if kind is None:
                return None
            [value] = await self._client.data_converter.decode(started.input.payloads, [kind])
            return value
        return None

    async def _terminate(self, workflow_id: str, reason: str) -> bool:
        try:
            await self._client.get_workflow_handle(workflow_id).terminate(reason=reason)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:  # already closed (a child, with its parent)
                raise
            return False
        return True

    @activity.defn(name=names.REMOVE_RUN_TASKS)
    async def remove_run_tasks(self, request: RemoveRunTasks) -> RunTasksRemoved:
        """Stop every task of the run on its fleets' instances (killed at once for an abort, else after its
        stop_duration), remove it, and free the jobs' volumes and service replicas."""
        async with heartbeating():
            runs = await asyncio.to_thread(self._runs, request.run_id)
            records = [
                job
                for run in runs
                for job in await asyncio.to_thread(self._store.list_job_submissions, run.id)
                if job.finished_at is None
            ]
            instances = await asyncio.to_thread(
                self._instance_names, request, [j.instance_name for j in records]
            )
            grace = 0.0 if request.abort else max(_grace(run) for run in runs)
            reason = stop_reason(request.abort).to_job_termination_reason()  # as the run tells its jobs
            removed: list[str] = []
            unremoved: dict[str, str] = {}
            for instance in instances:
                try:
                    client = await self._instances.resolve(instance)
                    removed += await self._remove_tasks(client, f"{request.run_id}-", grace, reason)
                except (AgentError, AgentUnreachable, LookupError) as err:
                    why = f"could not remove its task from {instance}: {err}"
                    unremoved |= {j.id: why for j in records if j.instance_name == instance}
            jobs = sorted({j.id for j in records} | set(removed) | set(request.jobs))
            await asyncio.to_thread(self._free, runs, jobs)
        return RunTasksRemoved(jobs=jobs, removed=sorted(removed), unremoved=unremoved)

    async def _remove_tasks(
        self, client: AgentClient, prefix: str, grace: float, reason: JobTerminationReason
    ) -> list[str]:
        """Stop the agent's tasks whose id starts with `prefix`, wait at most `grace` (and a margin) for
        them to end, keep the rest of their logs, then remove them (one still running is killed first)."""
        tasks = [t.id for t in await client.list_tasks() if t.id.startswith(prefix)]
        message = "its run's workflow was stuck: stopped from outside"
        for task in tasks:
            await client.terminate(task, reason=reason, message=message, timeout=grace)
        running = await _until_ended(client, tasks, grace + _STOP_MARGIN)
        for task in running:  # past its grace period: killed, as the agent should have done
            await client.terminate(task, reason=reason, message=message, timeout=0)
        await _until_ended(client, running, _STOP_MARGIN)
        for task in tasks:
            with contextlib.suppress(TimeoutError):  # a task its agent cannot end keeps its log there
                await asyncio.wait_for(self._keep_log(client, task), _STOP_MARGIN)
            await remove_task(client, task)
        return tasks

    async def _keep_log(self, client: AgentClient, task: str) -> None:
        """The last bytes of a task's log, which the instance's watch may not have stored before the task
        is removed (its job's workflow, which would wait for them, is gone)."""
        at = await asyncio.to_thread(self._store.log_size, task)
        with contextlib.suppress(AgentError):  # no log: the task never started
            async for chunk in client.stream_logs(task, at):
                await asyncio.to_thread(self._store.append_log, task, at, chunk, time.time())
                at += len(chunk)

    def _runs(self, run_id: str) -> list[RunRecord]:
        """The run and, for a pipeline, its tasks' runs."""
        run = self._store.get_run(run_id)
        if run is None:
            raise LookupError(f"run {run_id} is not in the store")
        return [run, *self._store.list_pipeline_tasks(run_id)]

    def _instance_names(self, request: RemoveRunTasks, held: list[str | None]) -> list[str]:
        names_ = {LOCAL_INSTANCE for fleet in request.fleets if fleet == LOCAL_FLEET}
        for fleet in request.fleets:
            names_ |= {i.name for i in self._store.list_instances(request.project, fleet)}
        return sorted(names_ | {name for name in held if name is not None})

    def _free(self, runs: list[RunRecord], jobs: list[str]) -> None:
        for job in jobs:
            self._store.detach_volumes(job)
        for replica in self._store.list_service_replicas([run.id for run in runs]):
            self._store.remove_replica(replica.id)

    @activity.defn(name=names.RECORD_STUCK_STOP)
    async def record_stuck_stop(self, request: RecordStuckStop) -> StopReply:
        """The run's end, its tasks' runs' first for a pipeline, stored in one transaction each."""
        return await asyncio.to_thread(self._record, request)

    def _record(self, request: RecordStuckStop) -> StopReply:
        runs = self._runs(request.run_id)
        ended: dict[str, RecordRun] = {}
        for run in [*runs[1:], runs[0]]:  # a pipeline's tasks first: its own log says how its task ended
            stop = StuckStop(run.id, request.abort, request.note, time.time(), request.unremoved)
            run_events, job_events = self._stored_events(run.id)
            try:
                record = end_stuck_run(stop, run_events, job_events, ended)
            except (
                EventlogError
            ) as err:  # a bug: retrying would not help, and the stop must not wait for ever
                why = f"run {run.run_name}: its end cannot be logged: {err}"
                raise ApplicationError(why, non_retryable=True) from err
            if record is not None:
                ended[run.id] = record
                store_run_changes(self._store, record)
        final = self._store.get_run(request.run_id)
        assert final is not None  # read just above
        reply = {
            "status": final.status,
            "termination_reason": final.termination_reason,
            "stuck": request.note,
        }
        return StopReply.model_validate(reply)

    def _stored_events(self, run_id: str) -> tuple[list[Event], dict[str, list[Event]]]:
        """The run's stored eventlog, and each of its job submissions', in order."""
        rows = sorted(self._store.read_all_events(run_id), key=lambda r: (r.job_submission_id, r.seq))
        job_events: dict[str, list[Event]] = {}
        for row in rows:
            job_events.setdefault(row.job_submission_id, []).append(row.to_event())
        return job_events.pop(RUN_EVENTLOG, []), job_events


async def _until_ended(client: AgentClient, tasks: list[str], limit: float) -> list[str]:
    """Wait at most `limit` for the agent's `tasks` to end; those still running then."""
    deadline = time.monotonic() + limit
    while True:
        running = [
            t.id for t in await client.list_tasks() if t.id in tasks and t.status != TaskStatus.TERMINATED
        ]
        if not running or time.monotonic() >= deadline:
            return running
        activity.heartbeat()
        await asyncio.sleep(_POLL)


def _grace(run: RunRecord) -> float:
    """Its stop_duration, as the job's own stop would give it (core.jobs.phases.grace_seconds)."""
    configuration = run.run_configuration()
    duration = configuration.stop_duration if configuration is not None else DEFAULT_STOP_DURATION
    return float(duration or 0)


def _job_id(inp: JobInput) -> str:
    return job_submission_id(inp.run_id, inp.replica_num, inp.job_num, inp.submission_num)
