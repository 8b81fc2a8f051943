"""A project's runs where the CLI holds the store and Temporal's credentials itself and has no login: an
operator's, on a deployment's own host (FERRY_TEMPORAL_ADDRESS and FERRY_DATABASE_URL; see
docs/teams.md#one-way-in). It does what Ferry's API does for each run route (api/project_runs.py), as the
user FERRY_USER names, with the interface of the CLI's client of the API (cli/remote_runs.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from api.messages import DeletedRun, DeployedRun, LiveAsk, LiveNews, RunPlan, RunSubmission, SubmittedRun
from api.project_runs import ProjectRuns
from cli.code_archive import packed_code, with_environment
from cli.login_file import default_user
from cli.run_names import generated_name
from core.configuration import RunConfiguration
from core.configuration.notifications import private_webhooks_allowed
from core.settings import Settings
from core.wire.run_messages import StopReply
from store import RunRecord

if TYPE_CHECKING:
    from cli.api import FerryAPI
    from core.temporal_connection import TemporalConnection
    from store.repository import Store


class DirectRuns:
    def __init__(
        self,
        store: Store,
        project: str,
        authorized_keys: list[str],
        connect: Callable[[], Awaitable[FerryAPI]],
        connection: Callable[[], TemporalConnection],
    ) -> None:
        self.store = store
        self.project = project
        self.authorized_keys = authorized_keys
        self._connect = connect  # cli.context.Context.api: UnreachableServer where Temporal is not reached
        self._connection = connection
        self._runs: ProjectRuns | None = None

    async def _connected(self) -> ProjectRuns:
        if self._runs is None:
            api = await self._connect()
            allowed = private_webhooks_allowed(Settings.from_env().webhooks_allow_private, embedded=False)
            self._runs = ProjectRuns(self.store, api.client, self.project, allowed)
        return self._runs

    async def submit(
        self, configuration: RunConfiguration, *, repo_dir: Path, run_name: str | None = None
    ) -> SubmittedRun:
        runs = await self._connected()
        name = run_name or configuration.name or generated_name()
        configuration = with_environment(configuration)
        archive, code_name = await asyncio.to_thread(packed_code, repo_dir, configuration)
        code_hash = await asyncio.to_thread(self.store.put_code, archive)
        submission = RunSubmission(
            configuration=configuration,
            run_name=name,
            code_hash=code_hash,
            code_name=code_name,
            authorized_keys=self.authorized_keys,
        )
        return await runs.submit(submission, user=default_user())

    def plan(self, configuration: RunConfiguration) -> RunPlan:
        return ProjectRuns(self.store, None, self.project).plan(configuration, default_user())

    async def check(self, name: str, configuration: RunConfiguration) -> None:
        await (await self._connected()).check(name, configuration)

    async def delete(self, ref: str) -> DeletedRun:
        return await (await self._connected()).delete(ref)

    async def stop(self, run_name: str, *, abort: bool = False) -> StopReply:
        return await (await self._connected()).stop(run_name, abort=abort, by=default_user())

    async def deploy(self, run_name: str, configuration: RunConfiguration) -> DeployedRun:
        return await (await self._connected()).deploy(run_name, configuration, by=default_user())

    def live(self, ask: LiveAsk) -> LiveNews:
        """`ps`'s news, asked with a client of its own (a table is drawn outside any event loop); none of
        Temporal's where it is not reached."""
        return asyncio.run(self._live(ask))

    async def _live(self, ask: LiveAsk) -> LiveNews:
        from temporalio.client import Client

        from core.temporal_connection import ConnectionSettingsError
        from worker.temporal import connect_to

        client: Client | None
        try:
            client = await asyncio.wait_for(connect_to(self._connection()), 5.0)
        except (RuntimeError, TimeoutError, ConnectionSettingsError):
            client = None
        return await ProjectRuns(self.store, client, self.project).live(ask)

    async def wait(self, run_name: str) -> RunRecord:
        from cli.remote_runs import wait_for_end

        return await wait_for_end(self.store, self.project, run_name)
