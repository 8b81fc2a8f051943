"""Ferry's small Python API, on which the CLI stands: submit, list, get, stop, logs, events."""

from __future__ import annotations

import asyncio

from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle

from cli.errors import FerryError, RunActive, RunNotFound, RunStuck
from cli.login_file import default_user
from cli.run_submission import RunSubmissions
from cli.stuck import StuckWorkflow, stop_stuck_run, stuck_runs, stuck_workflows
from core.configuration import RunConfiguration
from core.eventlog import Event
from core.status import RunStatus
from core.wire.run_messages import (
    DeployReply,
    DeployRequest,
    StopReply,
    StopRequest,
)
from store import EventRecord, RunRecord
from workflows.run import RunWorkflow
from workflows.web_ui import failed_run_result

__all__ = ["FerryAPI", "FerryError", "RunActive", "RunNotFound", "default_user"]


class FerryAPI(RunSubmissions):
    """A project's runs: started (RunSubmissions), stopped, re-applied, waited for, read."""

    async def get_run(self, run_name: str) -> RunRecord:
        record = await asyncio.to_thread(self.store.find_run, self.project, run_name)
        if record is None:
            raise RunNotFound(f"no run named {run_name!r} in project {self.project!r}")
        return record

    async def list_runs(self, *, all_runs: bool = False, limit: int = 100) -> list[RunRecord]:
        return await asyncio.to_thread(self.store.list_runs, self.project, not all_runs, limit)

    def _handle(self, record: RunRecord) -> WorkflowHandle[RunWorkflow, object]:
        return self.client.get_workflow_handle_for(RunWorkflow.run, record.workflow_id)

    async def stop(self, run_name: str, *, abort: bool = False, by: str | None = None) -> StopReply:
        record = await self.get_run(run_name)
        if RunStatus(record.status).is_finished():
            return StopReply(status=RunStatus(record.status))
        stuck = await self._stuck(record)
        if stuck is not None:  # it would never take the update: stopped from outside instead
            return await stop_stuck_run(self.client, self.task_queue, self.project, record, stuck, abort)
        return await self._handle(record).execute_update(RunWorkflow.stop, StopRequest(abort=abort, by=by))

    async def _stuck(self, record: RunRecord) -> StuckWorkflow | None:
        return stuck_runs(await stuck_workflows(self.client)).get(record.workflow_id)

    async def _refuse_if_stuck(self, record: RunRecord, what: str) -> None:
        """An update to a stuck workflow would wait for ever: said at once instead (docs/upgrades.md)."""
        stuck = await self._stuck(record)
        if stuck is not None:
            raise RunStuck(
                f"run {record.run_name} cannot take {what}: its {stuck.message()} "
                "(a worker of the release that started it lets it go on; docs/upgrades.md#stuck-runs)"
            )

    async def deploy(
        self, run_name: str, configuration: RunConfiguration, by: str | None = None
    ) -> DeployReply:
        """Re-apply an active service's configuration in place (a rolling deployment), or a scheduled run's
        (its next cycles); the run records the new configuration in the store, which the proxies read (auth,
        strip_prefix, model)."""
        record = await self.get_run(run_name)
        await self.check_secrets([configuration], f"run {run_name}")
        request = DeployRequest(configuration=configuration, by=by)
        await self._refuse_if_stuck(record, "a new configuration")
        # The run records its new configuration itself, once it has taken it (docs/runs.md#the-store).
        return await self._handle(record).execute_update(RunWorkflow.deploy, request)

    async def wait(self, run_name: str) -> RunRecord:
        """Until the run has finished; its final record."""
        record = await self.get_run(run_name)
        handle = self._handle(record)
        desc = await handle.describe()
        if desc.status == WorkflowExecutionStatus.RUNNING:
            try:
                await handle.result()
            except WorkflowFailureError as err:
                if failed_run_result(err.cause) is None:  # a FAILED run's workflow fails: no error
                    raise
        return await self.get_run(run_name)

    def logs(
        self, record: RunRecord, *, replica: int = 0, job: int = 0, offset: int = 0
    ) -> tuple[bytes, int]:
        """The latest submission's log of one job, from `offset`; the next offset."""
        jobs = [
            j
            for j in self.store.list_job_submissions(record.id)
            if (j.replica_num, j.job_num) == (replica, job)
        ]
        if not jobs:
            return b"", offset
        return self.store.read_log(jobs[-1].id, offset)

    def run_events(self, record: RunRecord) -> list[Event]:
        """The run's own eventlog."""
        return _events(self.store.read_events(record.id, None))

    def job_events(self, record: RunRecord, job_submission_id: str) -> list[Event]:
        """One job submission's eventlog."""
        return _events(self.store.read_events(record.id, job_submission_id))

    def all_events(self, record: RunRecord) -> list[Event]:
        """The run's and its jobs' events, in time order."""
        return _events(self.store.read_all_events(record.id))


def _events(rows: list[EventRecord]) -> list[Event]:
    return [r.to_event() for r in rows]
