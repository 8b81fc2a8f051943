"""Fleets in Ferry's Python API: apply, describe, list and delete them; where a run goes; set-priority.

A fleet is a FleetRecord in the store and a FleetWorkflow (its scheduler). The store answers `ferry fleet
list` without Temporal; the workflow answers what is live (the queue, the deployment's progress).
Every project has a `local` fleet (this machine's agent), started on demand by its first run.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from cli.errors import FerryError, NotFound, RunNotFound
from core.backends.slurm import fleet_backend_column
from core.configuration import FleetConfiguration, RunConfiguration
from core.fleets.book import FleetInput, instance_name
from core.fleets.messages import FleetDescription
from core.fleets.offers import FleetOffer
from core.fleets.status import FleetStatus
from core.settings import fleet_task_queue
from core.status import RunStatus
from core.wire.job_messages import PlacementRequest
from core.wire.run_messages import SetPriority
from core.wire.workflow_ids import LOCAL_FLEET, fleet_workflow_id
from store import FleetRecord, InstanceRecord, Store
from store.fleet_repository import fleet_id
from workflows.fleet import FleetWorkflow
from workflows.run import RunWorkflow

_POLL = 0.1


class FleetNotFound(NotFound):
    pass


async def choose_fleet(store: Store, project: str, configuration: RunConfiguration) -> str:
    """Where a run goes, decided once at submission: the first of its `fleets` that exists, else the
    project's newest SSH fleet or fleet with `nodes`, else this machine (`local`)."""
    return await first_fleet(store, project, configuration.fleets)


async def first_fleet(store: Store, project: str, wanted: list[str] | None) -> str:
    """The first of the `wanted` fleets that exists (FleetNotFound if none does); without any, the
    project's newest SSH fleet or fleet with `nodes`, else this machine (`local`)."""
    return pick_fleet(await asyncio.to_thread(store.list_fleets, project), project, wanted)


def pick_fleet(fleets: list[FleetRecord], project: str, wanted: list[str] | None) -> str:
    """first_fleet's choice among the project's fleets (newest first)."""
    active = {f.name: f for f in fleets if f.status == FleetStatus.ACTIVE}
    if wanted:
        for name in wanted:
            if name == LOCAL_FLEET or name in active:
                return name
        names = ", ".join(wanted)
        if len(wanted) == 1:
            raise FleetNotFound(f"no fleet named {names} in project {project!r} (see ferry fleet list)")
        raise FleetNotFound(f"none of the fleets {names} exists in project {project!r}")
    # The newest SSH fleet or fleet with `nodes` (docs/fleets.md)
    own = [f for f in fleets if f.status == FleetStatus.ACTIVE and f.backend != "local"]
    return own[0].name if own else LOCAL_FLEET


def backend_for(store: Store, project: str, configuration: FleetConfiguration, name: str) -> str:
    """The backend that creates a fleet's instances: the first of its `backends` (a name or a type) the
    project has, else the project's first (docs/backends.md#elastic-fleets); FerryError when none."""
    backends = store.list_backends(project)
    wanted = configuration.backends
    for record in backends:
        if not wanted or record.name in wanted or record.type in wanted:
            return record.name
    have = f"it has {', '.join(r.name for r in backends)}" if backends else "it has none"
    asked = f" among {', '.join(wanted)}" if wanted else ""
    raise FerryError(
        f"fleet {name} has `nodes`, and project {project} has no backend{asked} that can create "
        f"instances ({have}): apply one first (docs/backends.md)"
    )


def list_fleets(store: Store, project: str) -> list[tuple[FleetRecord, list[InstanceRecord]]]:
    """The project's fleets and their instances, from the store alone (newest fleet first)."""
    return [(fleet, store.list_instances(project, fleet.name)) for fleet in store.list_fleets(project)]


class LocalFleetStarts:
    """When each project's local fleet was last made sure of (recorded, its scheduler started) in this
    process. A CLI makes sure once; Ferry's API, which submits for every caller, once per `recheck_s` per
    project rather than once per submission: each costs Temporal a start (docs/teams.md#the-apis-cost)."""

    def __init__(self, recheck_s: float = float("inf")) -> None:
        self.recheck_s = recheck_s
        self._started: dict[str, tuple[asyncio.Future[None], float]] = {}

    async def ensure(self, project: str, start: Callable[[], Awaitable[None]]) -> None:
        """`start()` unless a start of the project's local fleet succeeded (or is under way) within
        `recheck_s`; submissions made at once share one start."""
        found = self._started.get(project)
        now = time.monotonic()
        if (
            found is None
            or now - found[1] > self.recheck_s
            or found[0].done()
            and (found[0].cancelled() or found[0].exception() is not None)
        ):  # the first, one after a failure, or one to check again
            found = (asyncio.ensure_future(start()), now)
            self._started[project] = found
        await asyncio.shield(found[0])


class FleetAPI:
    def __init__(
        self,
        client: Client,
        store: Store,
        *,
        project: str,
        task_queue: str,
        local_starts: LocalFleetStarts | None = None,
    ) -> None:
        self.client = client
        self.store = store
        self.project = project
        self.task_queue = task_queue
        self._local_starts = local_starts or LocalFleetStarts()

    # --- the local fleet -----------------------------------------------------------------------------------

    async def ensure_local(self) -> None:
        """The project's local fleet: recorded, and its scheduler running (started if it is not), as often
        as its LocalFleetStarts says (once per FleetAPI by default)."""
        await self._local_starts.ensure(self.project, self._start_local)

    async def _start_local(self) -> None:
        record = await asyncio.to_thread(self.store.get_fleet, self.project, LOCAL_FLEET)
        if record is None or record.status != FleetStatus.ACTIVE:
            await asyncio.to_thread(self.store.put_fleet, self._record(LOCAL_FLEET, None))
        await self.client.start_workflow(
            FleetWorkflow.run,
            FleetInput(project=self.project, name=LOCAL_FLEET),
            id=fleet_workflow_id(self.project, LOCAL_FLEET),
            task_queue=fleet_task_queue(self.task_queue),
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )

    # --- SSH fleets ----------------------------------------------------------------------------------------

    async def apply(
        self,
        configuration: FleetConfiguration,
        name: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> tuple[FleetRecord, bool]:
        """The fleet created (its hosts then deploy), or the same fleet again unchanged; True if created.
        `env`'s bare NAMEs are taken from `environ` (default: this process's; the API's routes pass none:
        the client applied them, docs/teams.md#fleets)."""
        name = name or configuration.name
        if name is None:
            raise FerryError("a fleet needs a name: set `name` in the file or pass -n NAME")
        if name == LOCAL_FLEET:
            raise FerryError(f"{LOCAL_FLEET} is the name of this machine's fleet: choose another name")
        backend = None
        if not configuration.is_ssh:
            backend = await asyncio.to_thread(backend_for, self.store, self.project, configuration, name)
        try:  # `env` as applied: each bare NAME from this environment (docs/fleets.md#env)
            env = configuration.resolved_env(os.environ if environ is None else environ)
        except ValueError as err:
            raise FerryError(str(err)) from None
        configuration = configuration.model_copy(update={"name": name, "env": env})
        existing = await asyncio.to_thread(self.store.get_fleet, self.project, name)
        if existing is not None and existing.status != FleetStatus.DELETED:
            if existing.status == FleetStatus.DELETING:
                raise FerryError(f"fleet {name} is being deleted: apply it again once it is gone")
            if existing.configuration != configuration.model_dump_json():
                raise FerryError(
                    f"fleet {name} exists with another configuration: "
                    f"delete it first (ferry fleet delete {name})"
                )
            await self._start(configuration, name, WorkflowIDConflictPolicy.USE_EXISTING, backend)
            return existing, False
        await self._check_names(configuration, name)
        try:
            await self._start(configuration, name, WorkflowIDConflictPolicy.FAIL, backend)
        except WorkflowAlreadyStartedError:
            raise FerryError(f"an earlier fleet {name} is still being deleted: try again shortly") from None
        record = self._record(name, configuration, backend)
        await asyncio.to_thread(self.store.put_fleet, record)
        return record, True

    async def _check_names(self, configuration: FleetConfiguration, name: str) -> None:
        """Instance names are unique among the instances that exist (workers know hosts by name)."""
        hosts = configuration.ssh_config.hosts if configuration.ssh_config else []
        for index in range(len(hosts)):
            found = await asyncio.to_thread(self.store.find_instance, instance_name(name, index))
            if found is not None and (found.project, found.fleet) != (self.project, name):
                raise FerryError(
                    f"instance name {found.name} is taken by fleet {found.fleet} of project {found.project}: "
                    "choose another fleet name"
                )

    async def _start(
        self,
        configuration: FleetConfiguration,
        name: str,
        conflict: WorkflowIDConflictPolicy,
        backend: str | None = None,
    ) -> None:
        await self.client.start_workflow(
            FleetWorkflow.run,
            FleetInput(project=self.project, name=name, configuration=configuration, backend=backend),
            id=fleet_workflow_id(self.project, name),
            task_queue=fleet_task_queue(self.task_queue),
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=conflict,
        )

    def _record(
        self, name: str, configuration: FleetConfiguration | None, backend: str | None = None
    ) -> FleetRecord:
        now = time.time()
        return FleetRecord(
            id=fleet_id(self.project, name),
            project=self.project,
            name=name,
            backend="local"
            if configuration is None
            else "ssh"
            if backend is None
            else fleet_backend_column(backend),
            configuration="{}" if configuration is None else configuration.model_dump_json(),
            status=FleetStatus.ACTIVE,
            workflow_id=fleet_workflow_id(self.project, name),
            created_at=now,
            updated_at=now,
        )

    def _fleet_handle(self, workflow_id: str) -> WorkflowHandle[FleetWorkflow, object]:
        return self.client.get_workflow_handle_for(FleetWorkflow.run, workflow_id)

    # --- reading -------------------------------------------------------------------------------------------

    async def describe(self, name: str) -> FleetDescription:
        """The fleet as its scheduler sees it now: instances, capacity, the queue."""
        handle = self._fleet_handle(fleet_workflow_id(self.project, name))
        try:
            return await handle.query(FleetWorkflow.describe)
        except RPCError as err:
            raise FleetNotFound(
                f"fleet {name} is not running in project {self.project!r}: {err.message}"
            ) from None

    async def offer(self, name: str, request: PlacementRequest) -> FleetOffer:
        """What the fleet's scheduler would do with the request now (`ferry offer`); nothing is queued."""
        handle = self._fleet_handle(fleet_workflow_id(self.project, name))
        try:
            return await handle.query(FleetWorkflow.answer_offer, request)
        except RPCError as err:
            raise FleetNotFound(
                f"fleet {name} is not running in project {self.project!r}: {err.message}"
            ) from None

    async def wait_deployed(self, name: str, timeout: float) -> FleetDescription:
        """Until the fleet's first deployment has ended (or `timeout` seconds): its description then."""
        from cli.fleet_deployment import until_deployed

        return await until_deployed(self.describe, name, timeout, _POLL)

    def list(self) -> list[tuple[FleetRecord, list[InstanceRecord]]]:
        return list_fleets(self.store, self.project)

    # --- deleting ------------------------------------------------------------------------------------------

    async def delete(self, name: str, *, wait: float | None = None) -> FleetDescription | None:
        """No new jobs on the fleet; its instances go once their jobs have ended, then the fleet.

        Waits up to `wait` seconds for the fleet to be gone when nothing runs on it; None if it was not
        running.
        """
        if name == LOCAL_FLEET:
            raise FerryError(f"{LOCAL_FLEET} is this machine's fleet: it cannot be deleted")
        record = await asyncio.to_thread(self.store.get_fleet, self.project, name)
        if record is None or record.status == FleetStatus.DELETED:
            raise FleetNotFound(f"no fleet named {name} in project {self.project!r} (see ferry fleet list)")
        await asyncio.to_thread(self.store.update_fleet, self.project, name, status=FleetStatus.DELETING)
        handle = self._fleet_handle(record.workflow_id)
        try:
            described = await handle.execute_update(FleetWorkflow.delete)
        except (RPCError, WorkflowUpdateFailedError):
            described = None
        if described is None or (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            await asyncio.to_thread(self._forget, name)
            return described
        if wait is not None and described.idle:
            await asyncio.wait_for(handle.result(), wait)
        return described

    def _forget(self, name: str) -> None:
        self.store.put_instances(self.project, name, [])
        self.store.update_fleet(self.project, name, status=FleetStatus.DELETED)

    # --- runs ----------------------------------------------------------------------------------------------

    async def set_priority(self, run_name: str, priority: int) -> None:
        """The run's new priority (0-100): its waiting replicas move in their fleet's queue at once."""
        if not 0 <= priority <= 100:
            raise FerryError(f"priority {priority} is not within 0..100")
        record = await asyncio.to_thread(self.store.find_run, self.project, run_name)
        if record is None:
            raise RunNotFound(f"no run named {run_name!r} in project {self.project!r}")
        if RunStatus(record.status).is_finished():
            raise FerryError(f"run {run_name} has finished ({record.status})")
        handle: WorkflowHandle[RunWorkflow, object] = self.client.get_workflow_handle_for(
            RunWorkflow.run, record.workflow_id
        )
        await handle.signal(RunWorkflow.set_priority, SetPriority(priority=priority))  # it records it
