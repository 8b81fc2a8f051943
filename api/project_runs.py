"""A project's runs operated over the store and a Temporal client: what Ferry's API does for each run route
(api/run_changes.py, api/run_live.py), and what an operator's CLI does itself where it holds the store and
Temporal's credentials instead of a login (docs/teams.md#one-way-in). Authorization is the API's, before."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from temporalio.client import Client

from activities.job_tokens import NO_API_URL, wants_api
from api.messages import DeletedRun, DeployedRun, LiveAsk, LiveNews, RunPlan, RunSubmission, SubmittedRun
from cli.api import FerryAPI
from cli.dev_environments import ask_connections
from cli.errors import FerryError
from cli.fleet_api import LocalFleetStarts
from cli.pulls import pull_lines
from cli.services import service_line, service_views
from cli.stuck import ASK_TIMEOUT, stuck_runs, stuck_workflows
from core.configuration import RunConfiguration, ServiceConfiguration
from core.configuration.notifications import refused_webhook
from core.settings import Settings
from core.wire.run_messages import StopReply
from store import JobSubmissionRecord, RunRecord
from store.repository import Store

Pairs = list[tuple[RunRecord, JobSubmissionRecord]]


@dataclass
class ProjectRuns:
    store: Store
    client: Client | None  # None: Temporal not reached (what needs it raises, `live` leaves it out)
    project: str
    # Whether webhooks may go to loopback and private addresses (docs/deployment.md#webhooks): refused
    # before submission where they may not, as the worker would refuse to post them.
    private_webhooks: bool = False
    local_starts: LocalFleetStarts | None = None  # the API's, shared by its submissions (cli.fleet_api)

    def _api(self, authorized_keys: list[str] | None = None) -> FerryAPI:
        return FerryAPI(
            self._client(),
            self.store,
            project=self.project,
            authorized_keys=authorized_keys,
            local_starts=self.local_starts,
        )

    async def submit(self, submission: RunSubmission, user: str) -> SubmittedRun:
        if not self.private_webhooks:
            for spec in submission.configuration.notifications:
                refused = refused_webhook(spec.url)
                if refused is not None:
                    raise FerryError(f"run {submission.run_name}: notifications: {refused}")
        if wants_api(submission.configuration) and Settings.from_env().job_api_url is None:
            raise FerryError(f"run {submission.run_name}: {NO_API_URL}")
        api = self._api(submission.authorized_keys)
        record = await api.submit_stored(
            submission.configuration,
            code_hash=submission.code_hash,
            code_name=submission.code_name,
            run_name=submission.run_name,
            user=user,
        )
        notes = await asyncio.to_thread(service_notes, self.store, record, submission.configuration)
        return SubmittedRun(run=record, notes=notes)

    def plan(self, configuration: RunConfiguration, user: str) -> RunPlan:
        """The plan's `User` and `Runs on`, as the submission would choose (cli.run_plan.runs_on)."""
        from cli.run_plan import runs_on

        return RunPlan(user=user, runs_on=runs_on(self.store, self.project, configuration))

    async def check(self, name: str, configuration: RunConfiguration) -> None:
        """What a submission of this name would be refused for first: a cycle of dependencies, a secret
        not set (FerryError)."""
        api = self._api()
        await asyncio.to_thread(api.resolve_dependencies, name, configuration)
        await api.check_secrets([configuration], f"run {name}")

    async def delete(self, ref: str) -> DeletedRun:
        """A finished run forgotten, by id or name (api/run_deletion.py); RunNotFound, RunActive."""
        from api.run_deletion import delete_run

        run = await asyncio.to_thread(self.store.get_run, ref)
        if run is None or run.project != self.project:
            run = await self._api().get_run(ref)
        jobs, executions = await delete_run(self._client(), self.store, run)
        return DeletedRun(jobs=jobs, executions=executions)

    def _client(self) -> Client:
        if self.client is None:
            raise RuntimeError("no Temporal client")
        return self.client

    async def stop(self, name: str, *, abort: bool, by: str) -> StopReply:
        return await self._api().stop(name, abort=abort, by=by)

    async def deploy(self, name: str, configuration: RunConfiguration, by: str) -> DeployedRun:
        api = self._api()
        reply = await api.deploy(name, configuration, by)
        record = await api.get_run(name)
        notes = (
            []
            if reply.refused is not None
            else await asyncio.to_thread(service_notes, self.store, record, configuration)
        )
        return DeployedRun(reply=reply, notes=notes)

    async def live(self, ask: LiveAsk) -> LiveNews:
        """Services' URLs and probes from the store; stuck runs, dev environments' connections and pulls
        from Temporal, or none where it is not reached: `ps` shows the store's runs regardless."""
        runs, connections, pulls = await asyncio.to_thread(_records, self.store, self.project, ask)
        services = await asyncio.to_thread(service_views, self.store, list(runs.values()))
        unknown = {job.id: None for _, job in connections}
        news = LiveNews(services=services, stuck={}, connections=unknown, pulls={})
        active = {run.workflow_id: run.id for run in runs.values() if run.finished_at is None}
        if self.client is None or not (active or connections or pulls):
            return news
        try:
            found = (
                stuck_runs(await asyncio.wait_for(stuck_workflows(self.client), ASK_TIMEOUT))
                if active
                else {}
            )
        except (RuntimeError, TimeoutError):  # RPCError is a RuntimeError
            found = {}
        told, lines = await asyncio.gather(
            ask_connections(self.client, connections), pull_lines(self.client, pulls)
        )
        stuck = {active[workflow]: why for workflow, why in found.items() if workflow in active}
        return LiveNews(services=services, stuck=stuck, connections=told, pulls=lines)


def service_notes(store: Store, record: RunRecord, configuration: RunConfiguration) -> list[str]:
    """Where a service answers, and what a request needs (docs/services.md)."""
    if not isinstance(configuration, ServiceConfiguration):
        return []
    return [service_line(store, record, configuration)]


def _records(store: Store, project: str, ask: LiveAsk) -> tuple[dict[str, RunRecord], Pairs, Pairs]:
    """The project's runs and jobs among those asked of; another project's are not there."""
    runs: dict[str, RunRecord] = {}

    def run_of(run_id: str) -> RunRecord | None:
        if run_id not in runs:
            found = store.get_run(run_id)
            if found is None or found.project != project:
                return None
            runs[run_id] = found
        return runs[run_id]

    def pairs(job_ids: list[str]) -> Pairs:
        found = []
        for job_id in job_ids:
            job = store.get_job_submission(job_id)
            run = None if job is None else run_of(job.run_id)
            if job is not None and run is not None:
                found.append((run, job))
        return found

    for run_id in ask.runs:
        run_of(run_id)
    return runs, pairs(ask.connections), pairs(ask.pulls)
