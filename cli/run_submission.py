"""Runs started in Ferry's Python API: a run or a pipeline submitted, checked first (its secrets, its
name, its dependencies), placed on a fleet and its workflow started. What the API's submission routes do
(api/project_runs.py, api/pipeline_routes.py) and an operator's CLI; cli/api.py adds what is done to
runs once started."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.common import TypedSearchAttributes, WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from cli.code_archive import packed_code, with_environment
from cli.errors import CodeMissing, FerryError, RunActive
from cli.fleet_api import FleetAPI, LocalFleetStarts, choose_fleet
from cli.login_file import default_user
from cli.run_names import generated_name
from cli.secret_api import check_secrets
from cli.volume_api import run_volumes
from core.configuration import RunConfiguration
from core.configuration.pipeline import PIPELINE_TYPE, PipelineConfiguration
from core.runs.status_words import WAITING_FOR
from core.runs.watching import dependency_cycle
from core.runs.workflow_messages import RunInput
from core.settings import DEFAULT_PROJECT, TASK_QUEUE
from core.status import RunStatus
from core.web_ui import pipeline_metadata, run_metadata
from core.wire import revisions
from core.wire.run_messages import (
    DependencyTarget,
    PipelineInput,
)
from core.wire.workflow_ids import LOCAL_FLEET, run_workflow_id
from store import RunRecord, Store
from workflows.pipeline import PipelineWorkflow
from workflows.run import RunWorkflow
from workflows.search_attributes import pipeline_search_attributes, run_search_attributes


class RunSubmissions:
    """Submissions of runs and pipelines in one project, as one user's keys (see FerryAPI)."""

    def __init__(
        self,
        client: Client,
        store: Store,
        *,
        project: str = DEFAULT_PROJECT,
        task_queue: str = TASK_QUEUE,
        authorized_keys: list[str] | None = None,
        local_starts: LocalFleetStarts | None = None,
    ):
        self.client = client
        self.store = store
        self.project = project
        self.task_queue = task_queue
        # The user's SSH public keys, installed for each job it submits (docs/attach.md).
        self.authorized_keys = authorized_keys or []
        self._fleet_api: FleetAPI | None = None
        self._local_starts = local_starts  # shared by the API's submissions (cli.fleet_api)

    def fleets(self) -> FleetAPI:
        """Fleets of this project: apply, list, describe, delete; set-priority (cli.fleet_api)."""
        if self._fleet_api is None:
            self._fleet_api = FleetAPI(
                self.client,
                self.store,
                project=self.project,
                task_queue=self.task_queue,
                local_starts=self._local_starts,
            )
        return self._fleet_api

    async def submit(
        self,
        configuration: RunConfiguration,
        *,
        repo_dir: Path,
        run_name: str | None = None,
        user: str | None = None,
    ) -> RunRecord:
        """Validate-free submission of an already valid configuration: code to the store, run started."""
        name = run_name or configuration.name or generated_name()
        from core.configuration.loading import ensure_runnable

        ensure_runnable(configuration, f"run {name}")  # refused before anything is stored
        configuration = with_environment(configuration)
        code_hash, code_name = await self.store_code(repo_dir, configuration)
        return await self.submit_stored(
            configuration, code_hash=code_hash, code_name=code_name, run_name=name, user=user
        )

    async def submit_stored(
        self,
        configuration: RunConfiguration,
        *,
        code_hash: str,
        code_name: str,
        run_name: str | None = None,
        user: str | None = None,
    ) -> RunRecord:
        """The run started, its code already in the store and its `env` as applied (`with_environment`,
        where the user applies it): what Ferry's API does with a submission (api/run_changes.py)."""
        name = run_name or configuration.name or generated_name()
        from core.configuration.loading import ensure_runnable  # here: YAML stays out of `ferry ps`

        ensure_runnable(configuration, f"run {name}")  # refused before anything is stored or started
        if not await asyncio.to_thread(self.store.has_code, code_hash):
            raise CodeMissing(f"run {name}: its code ({code_hash}) is not in the store: send it first")
        await self.check_secrets([configuration], f"run {name}")
        await self._ensure_name_free(name)
        dependencies = await asyncio.to_thread(self.resolve_dependencies, name, configuration)
        on, volume_instances = await asyncio.to_thread(run_volumes, self.store, self.project, configuration)
        fleet = on or await choose_fleet(self.store, self.project, configuration)
        if fleet == LOCAL_FLEET:
            await self.fleets().ensure_local()
        now = time.time()
        record = await self._put_record(
            name,
            user,
            configuration.type,
            configuration.model_dump_json(),
            code_hash,
            now,
            configuration.priority,
        )
        inp = RunInput(
            run_id=record.id,
            project=self.project,
            run_name=name,
            user=record.user,
            configuration=configuration,
            code_hash=code_hash,
            repo_id=code_name,
            submitted_at=now,
            fleet=fleet,
            dependencies=dependencies,
            volume_instances=volume_instances,
            authorized_keys=self.authorized_keys,
            revision=revisions.CURRENT,
        )
        # What the Web UI shows of it (docs/runs.md#the-web-ui): a service's URL as of its submission.
        url = (
            await asyncio.to_thread(self._service_url, name, configuration.https)
            if configuration.type == "service"
            else None
        )
        attributes = run_search_attributes(inp, RunStatus.SUBMITTED)
        await self._start(RunWorkflow.run, inp, record, attributes, run_metadata(inp, url))
        return record

    def _service_url(self, run_name: str, https: bool | str) -> str | None:
        from cli.services import proxy_url
        from core.services.domains import configured_domain, shown_service_url

        base = proxy_url(self.store)
        return (
            None
            if base is None
            else shown_service_url(base, configured_domain(), self.project, run_name, https)
        )

    async def submit_pipeline(
        self,
        pipeline: PipelineConfiguration,
        *,
        repo_dir: Path,
        run_name: str | None = None,
        user: str | None = None,
    ) -> RunRecord:
        """A pipeline's tasks, run one after another as one run (docs/pipelines.md): its tasks' `env` as
        applied here, its code stored, then `submit_stored_pipeline` (an operator's CLI, and tests)."""
        name = run_name or pipeline.name or generated_name()
        _refuse_pipeline(pipeline, name)  # refused before anything is stored
        tasks = [with_environment(task) for task in pipeline.tasks]  # where the user applies
        code_hash, code_name = await self.store_code(repo_dir)
        applied = pipeline.model_copy(update={"tasks": tasks})
        return await self.submit_stored_pipeline(
            applied, code_hash=code_hash, code_name=code_name, run_name=name, user=user
        )

    async def submit_stored_pipeline(
        self,
        pipeline: PipelineConfiguration,
        *,
        code_hash: str,
        code_name: str,
        run_name: str | None = None,
        user: str | None = None,
    ) -> RunRecord:
        """The pipeline started, its code already in the store and its tasks' `env` as applied where the
        user applies it: what Ferry's API does with a submission (api/pipeline_routes.py)."""
        name = run_name or pipeline.name or generated_name()
        _refuse_pipeline(pipeline, name)
        if not await asyncio.to_thread(self.store.has_code, code_hash):
            raise CodeMissing(f"run {name}: its code ({code_hash}) is not in the store: send it first")
        await self.check_secrets(list(pipeline.tasks), f"run {name}")
        await self._ensure_name_free(name)
        fleets, volume_instances = [], {}
        for task in pipeline.tasks:  # each where its volumes are (docs/volumes.md), else where it would go
            on, instances = await asyncio.to_thread(run_volumes, self.store, self.project, task)
            fleets.append(on or await choose_fleet(self.store, self.project, task))
            volume_instances.update(instances)
        if LOCAL_FLEET in fleets:
            await self.fleets().ensure_local()
        now = time.time()
        record = await self._put_record(name, user, PIPELINE_TYPE, pipeline.model_dump_json(), code_hash, now)
        inp = PipelineInput(
            run_id=record.id,
            project=self.project,
            run_name=name,
            user=record.user,
            tasks=list(pipeline.tasks),
            fleets=fleets,
            volume_instances=volume_instances,
            code_hash=code_hash,
            repo_id=code_name,
            submitted_at=now,
            authorized_keys=self.authorized_keys,
        )
        attributes = pipeline_search_attributes(inp)
        await self._start(PipelineWorkflow.run, inp, record, attributes, pipeline_metadata(inp))
        return record

    async def check_secrets(self, configurations: list[RunConfiguration], what: str) -> None:
        """FerryError naming each secret the configurations refer to that the project has not set
        (docs/secrets.md): said before anything is stored or started."""
        await asyncio.to_thread(check_secrets, self.store, self.project, list(configurations), what)

    async def _ensure_name_free(self, name: str) -> None:
        active = await asyncio.to_thread(self.store.find_run, self.project, name)
        if active is not None and RunStatus(active.status).is_active():
            raise RunActive(f"run {name!r} is {active.status}: stop it first")

    async def _put_record(
        self,
        name: str,
        user: str | None,
        run_type: str,
        configuration: str,
        code_hash: str,
        now: float,
        priority: int = 0,
    ) -> RunRecord:
        record = RunRecord(
            id=f"{name}-{secrets.token_hex(4)}",
            project=self.project,
            run_name=name,
            user=user or default_user(),
            type=run_type,
            status=RunStatus.SUBMITTED.value,
            configuration=configuration,
            code_hash=code_hash,
            submitted_at=now,
            updated_at=now,
            priority=priority,
            workflow_id=run_workflow_id(self.project, name),
        )
        await asyncio.to_thread(self.store.put_run, record)
        return record

    async def _start(
        self,
        run: Any,
        inp: RunInput | PipelineInput,
        record: RunRecord,
        attributes: TypedSearchAttributes,
        metadata: tuple[str, str],  # the Web UI's summary and details (core.web_ui)
    ) -> None:
        await self.client.start_workflow(
            run,
            inp,
            id=record.workflow_id,
            task_queue=self.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            search_attributes=attributes,
            static_summary=metadata[0],
            static_details=metadata[1],
        )

    async def store_code(
        self, repo_dir: Path, configuration: RunConfiguration | None = None
    ) -> tuple[str, str]:
        """The job's code in the store (`packed_code`); its hash, and its name (repo_id)."""
        archive, name = await asyncio.to_thread(packed_code, repo_dir, configuration)
        return await asyncio.to_thread(self.store.put_code, archive), name

    def resolve_dependencies(self, name: str, configuration: RunConfiguration) -> list[DependencyTarget]:
        """The runs `configuration` waits for, as the latest run of each name (docs/dependencies.md);
        FerryError for a cycle through the active runs' dependencies, itself included."""
        cycle = dependency_cycle(name, [d.run for d in configuration.depends_on], self._active_waits)
        if cycle is not None:
            if len(cycle) == 2:
                raise FerryError(f"run {name}: depends_on: a run cannot depend on itself")
            raise FerryError(f"run {name}: depends_on: a cycle of dependencies ({' -> '.join(cycle)})")
        targets = []
        for dependency in configuration.depends_on:
            record = self.store.find_run(self.project, dependency.run)
            targets.append(
                DependencyTarget(
                    run_name=dependency.run,
                    condition=dependency.condition,
                    run_id=None if record is None else record.id,
                    workflow_id=None if record is None else record.workflow_id,
                )
            )
        return targets

    def _active_waits(self, run_name: str) -> list[str]:
        """The runs a run still waits for (its `depends_on`, while its ps message says it waits); []
        for one that has started or ended."""
        record = self.store.find_run(self.project, run_name)
        if record is None or not (record.status_message or "").startswith(WAITING_FOR):
            return []
        configuration = record.run_configuration()
        return [d.run for d in configuration.depends_on] if configuration is not None else []


def _refuse_pipeline(pipeline: PipelineConfiguration, name: str) -> None:
    """FerryError for a task that cannot run, or names repos or files (one code directory serves all)."""
    from core.configuration.loading import ensure_runnable

    for index, task in enumerate(pipeline.tasks, start=1):
        ensure_runnable(task, f"run {name} task {index}")
        if task.repos or task.files:
            raise FerryError(f"run {name} task {index}: pipeline tasks take no `repos` or `files` yet")
