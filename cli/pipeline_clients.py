"""A pipeline's submission as the CLI makes it (docs/teams.md#pipelines): through Ferry's API as the
logged-in user (`RemotePipelines`, api/pipeline_routes.py), or an operator's CLI itself, with the store and
Temporal's credentials and no login (`DirectPipelines`, cli.api.FerryAPI). Each has `store`, the project's
runs as `apply` follows them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

from api.pipeline_messages import PipelineSubmission, SubmittedPipeline
from cli.code_archive import packed_code, with_environment
from cli.login_file import default_user
from cli.remote_runs import ApiSession, RunReader
from cli.run_names import generated_name
from core.configuration.pipeline import PipelineConfiguration
from store import RunRecord
from store.repository import code_hash
from store.run_reads import RunReads

if TYPE_CHECKING:
    from cli.api import FerryAPI
    from cli.context import Context


class PipelinesClient(Protocol):
    @property
    def store(self) -> RunReads: ...
    async def submit(
        self, pipeline: PipelineConfiguration, *, repo_dir: Path, run_name: str | None = None
    ) -> RunRecord: ...


def pipelines_client(ctx: Context) -> PipelinesClient:
    """The way `ctx.runs()` would go (docs/teams.md#one-way-in), with the user's SSH key for each job."""
    from cli.user_keys import public_key_line

    if ctx.through_api():
        return RemotePipelines(ApiSession(), ctx.project, [public_key_line(ctx.settings.home)])
    return DirectPipelines(ctx.store(), ctx.api)  # ctx.api installs the user's key itself


class RemotePipelines:
    """Pipelines submitted through the API as the logged-in user's: its code sent when the store lacks it,
    its tasks' `env` as applied here, never from the API's environment."""

    def __init__(self, session: ApiSession, project: str, authorized_keys: list[str]) -> None:
        self.session = session
        self.store = RunReader(session, project)
        self.authorized_keys = authorized_keys
        self._base = f"/api/projects/{quote(project, safe='')}"

    async def submit(
        self, pipeline: PipelineConfiguration, *, repo_dir: Path, run_name: str | None = None
    ) -> RunRecord:
        name = run_name or pipeline.name or generated_name()
        tasks = [with_environment(task) for task in pipeline.tasks]  # where the user applies
        archive, code_name = await asyncio.to_thread(packed_code, repo_dir)
        submission = PipelineSubmission(
            pipeline=pipeline.model_copy(update={"tasks": tasks}),
            run_name=name,
            code_hash=code_hash(archive),
            code_name=code_name,
            authorized_keys=self.authorized_keys,
        )
        body = json.loads(submission.model_dump_json())
        answer = await asyncio.to_thread(
            self.session.submit_with_code, self._base, "/pipelines", body, archive, name
        )
        return SubmittedPipeline.model_validate(answer).run


class DirectPipelines:
    """An operator's: the store and Temporal reached by the CLI itself, as FERRY_USER."""

    def __init__(self, store: RunReads, connect: Callable[[], Awaitable[FerryAPI]]) -> None:
        self.store = store
        self._connect = connect  # cli.context.Context.api: UnreachableServer where Temporal is not reached

    async def submit(
        self, pipeline: PipelineConfiguration, *, repo_dir: Path, run_name: str | None = None
    ) -> RunRecord:
        api = await self._connect()
        return await api.submit_pipeline(pipeline, repo_dir=repo_dir, run_name=run_name, user=default_user())
