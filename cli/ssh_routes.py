"""The way into a running job (docs/attach.md): which job, where its agent lets it in, and the `Host`
entries that reach it, computed over the store and a Temporal client. Ferry's API computes it for `POST
/api/projects/{p}/runs/{name}/ssh-route` (api/attach_routes.py), and so does an operator's CLI itself
(`DirectRoutes`); a logged-in user's CLI asks the API (`RemoteRoutes`; docs/teams.md#attach)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

from activities.ssh_config import ssh_targets
from api.attach_messages import SSHHost, SSHRoute
from cli import exit_codes
from cli.arrays import array_size
from cli.errors import FerryError
from cli.pipeline_tasks import run_jobs, task_run
from cli.ssh_hosts import HostEntry
from core.backends.slurm import slurm_backend_name
from core.configuration import FleetConfiguration
from core.configuration.backend import SlurmBackendConfiguration, SlurmLogin
from core.configuration.fleet import ProxyJump
from core.runs.arrays import max_parallel, shard_count, shard_of
from core.status import JobStatus, RunStatus
from core.wire.element_messages import ELEMENT_SSH_ENDPOINT, ElementRef
from core.wire.messages import SSHEndpoint
from core.wire.workflow_ids import LOCAL_FLEET, elements_workflow_id, job_workflow_id
from store import JobSubmissionRecord, RunRecord
from store.run_reads import RunReads

if TYPE_CHECKING:
    from temporalio.client import Client

    from cli.api import FerryAPI
    from cli.remote_runs import ApiSession
    from store.repository import Store

WAITS_FOR = frozenset({JobStatus.SUBMITTED, JobStatus.PROVISIONING, JobStatus.PULLING})
_ASK_TIMEOUT = 60.0  # the job's workflow asks its agent up to three times (workflows/job.py)


class CannotAttach(FerryError):
    """A job there is no way into now: the run has finished, has no such job, the job is not running, its
    agent refuses. Exit code 1, as `ferry attach` has always said it."""

    exit_code = exit_codes.FAILED


def running_job(
    reads: RunReads, run: RunRecord, replica: int, job: int
) -> tuple[RunRecord, JobSubmissionRecord] | str:
    """The run (a pipeline's latest task) and its latest submission of (replica, job) once that runs; until
    then the status it waits in; CannotAttach where it never will run."""
    if RunStatus(run.status).is_finished():
        raise CannotAttach(f"run {run.run_name} has finished ({run.status}): there is no job to attach to")
    current = task_run(reads, run, None)
    jobs = [j for j in run_jobs(reads, current) if (j.replica_num, j.job_num) == (replica, job)]
    latest = max(jobs, key=lambda j: j.submission_num, default=None)
    if latest is not None and latest.status == JobStatus.RUNNING:
        return current, latest
    if latest is None and run.status not in (RunStatus.SUBMITTED, RunStatus.PENDING):
        raise CannotAttach(f"run {run.run_name} has no job {job} of replica {replica}")
    if latest is not None and JobStatus(latest.status) not in WAITS_FOR:
        what = f"replica {replica}, job {job} is {latest.status}"
        raise CannotAttach(f"run {run.run_name}: {what}: there is nothing to attach to")
    return str(latest.status if latest else run.status)


async def ssh_route(
    store: Store, client: Callable[[], Awaitable[Client]], run: RunRecord, replica: int, job: int
) -> SSHRoute:
    """The way into the run's job (replica, job), which runs now: the endpoint its workflow answers, and
    the route to it over the store's instance, fleet and backend; CannotAttach where there is none.
    `client`: Temporal's, connected once the store has no refusal to give."""
    found = await asyncio.to_thread(running_job, store, run, replica, job)
    if isinstance(found, str):  # the CLI waits for the job to run before it asks
        raise CannotAttach(f"run {run.run_name}: its job is not running yet ({found}): attach again soon")
    current, submission = found
    workflow_id = job_workflow_id(current.workflow_id, replica, job, submission.submission_num)
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError, RPCStatusCode

    temporal = await client()
    handle = temporal.get_workflow_handle(workflow_id)
    try:
        endpoint = await handle.execute_update("ssh_endpoint", result_type=SSHEndpoint)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND or not array_size(run):
            endpoint = SSHEndpoint(refused=_innermost(err))
        else:  # an array's element: its elements workflow answers (docs/runs.md#arrays)
            endpoint = await _element_endpoint(temporal, run, current.workflow_id, submission.id, replica)
    except WorkflowUpdateFailedError as err:  # its agent unreachable; the job just ended
        endpoint = SSHEndpoint(refused=_innermost(err))
    if endpoint.refused is not None or endpoint.port is None:
        raise CannotAttach(f"run {run.run_name}: cannot attach: {endpoint.refused}")
    hosts, host_keys = await asyncio.to_thread(route_hosts, store, run.run_name, endpoint)
    entries = [SSHHost(**dataclasses.asdict(host)) for host in hosts]
    return SSHRoute(user=endpoint.user, hosts=entries, host_keys=host_keys)


async def _element_endpoint(
    temporal: Client, run: RunRecord, run_workflow_id: str, job_id: str, replica: int
) -> SSHEndpoint:
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    shards = shard_count(max_parallel(run.run_configuration()))
    handle = temporal.get_workflow_handle(elements_workflow_id(run_workflow_id, shard_of(replica, shards)))
    try:
        return await handle.execute_update(
            ELEMENT_SSH_ENDPOINT, ElementRef(job_submission_id=job_id), result_type=SSHEndpoint
        )
    except (WorkflowUpdateFailedError, RPCError) as err:
        return SSHEndpoint(refused=_innermost(err))


def _innermost(err: BaseException) -> str:
    while (cause := getattr(err, "cause", None) or err.__cause__) is not None:
        err = cause
    return " ".join(str(err).split()) or type(err).__name__


def route_hosts(store: Store, alias: str, endpoint: SSHEndpoint) -> tuple[list[HostEntry], dict[str, str]]:
    """The job's `Host` entry (without a key: the user's own goes there), behind the host it is reached
    through when the instance is not this machine: an SSH fleet's host (the agent's SSH server is on its
    loopback), or a Slurm backend's login node (the agent's SSH server is on the compute node's addresses,
    docs/backends.md#dev-environments-and-attach)."""
    key_alias = f"ferry-agent-{endpoint.instance_name}"
    job_host = HostEntry(
        alias=alias,
        hostname="127.0.0.1",
        port=endpoint.port or 0,
        user=endpoint.user,
        identity_file=None,
        host_key_alias=key_alias,
    )
    host_keys = {key_alias: endpoint.host_key} if endpoint.host_key else {}
    instance = store.find_instance(endpoint.instance_name)
    fleet = (
        store.get_fleet(instance.project, instance.fleet)
        if instance is not None and instance.fleet != LOCAL_FLEET
        else None
    )
    if instance is None or fleet is None:
        return [job_host], host_keys
    if (backend := slurm_backend_name(fleet.backend)) is not None:
        login = _slurm_login(store, fleet.project, backend)
        hop = HostEntry(
            alias=f"{alias}-login",
            hostname=login.hostname,
            port=login.port,
            user=login.user,
            identity_file=login.identity_file,
            proxy_jump=_jump(login.proxy_jump, login.user, login.port),
        )
        job_host = dataclasses.replace(job_host, hostname=instance.address, proxy_jump=hop.alias)
        return [job_host, hop], host_keys
    conf = FleetConfiguration.model_validate(fleet.configuration_data())
    target = next((t for t in ssh_targets(conf, instance.fleet) if t.name == endpoint.instance_name), None)
    if target is None:
        return [job_host], host_keys
    jump = None
    if target.proxy_jump is not None:
        jump = f"{target.proxy_jump.user}@{target.proxy_jump.hostname}:{target.proxy_jump.port}"
    fleet_host = HostEntry(
        alias=f"{alias}-host",
        hostname=target.hostname,
        port=target.port,
        user=target.user,
        identity_file=target.identity_file,
        proxy_jump=jump,
    )
    job_host = dataclasses.replace(job_host, proxy_jump=fleet_host.alias)
    return [job_host, fleet_host], host_keys


def _slurm_login(store: Store, project: str, backend: str) -> SlurmLogin:
    record = store.get_backend(project, backend)
    if record is None:
        raise CannotAttach(
            f"project {project} has no backend {backend} any more: its nodes cannot be reached"
        )
    return SlurmBackendConfiguration.model_validate(record.configuration_data()).login


def _jump(hop: ProxyJump | None, user: str, port: int) -> str | None:
    """OpenSSH's ProxyJump for a login node's own `proxy_jump` (its unset fields are the login's)."""
    if hop is None:
        return None
    return f"{hop.user or user}@{hop.hostname}:{hop.port or 22}"


class JobRoutes(Protocol):
    """What `ferry attach` reads a project's runs with, and asks the way into a job of."""

    project: str

    @property
    def store(self) -> RunReads: ...
    async def ssh_route(self, run: RunRecord, replica: int, job: int) -> SSHRoute: ...


class RemoteRoutes:
    """Through the API, as the logged-in user (api/attach_routes.py)."""

    def __init__(self, session: ApiSession, reads: RunReads, project: str) -> None:
        self.session = session
        self.store = reads
        self.project = project

    async def ssh_route(self, run: RunRecord, replica: int, job: int) -> SSHRoute:
        path = f"/api/projects/{quote(self.project, safe='')}/runs/{quote(run.run_name, safe='')}/ssh-route"
        body = {"replica": replica, "job": job}
        answer = await asyncio.to_thread(self.session.request, "POST", path, json=body, timeout=_ASK_TIMEOUT)
        return SSHRoute.model_validate(answer.json())


class DirectRoutes:
    """An operator's CLI, over the store and Temporal itself (docs/teams.md#one-way-in)."""

    def __init__(self, store: Store, project: str, client: Callable[[], Awaitable[Client]]) -> None:
        self.store = store
        self.project = project
        self._client = client  # connected when first asked: reading the run needs no Temporal

    @classmethod
    def over(cls, api: FerryAPI) -> DirectRoutes:
        async def client() -> Client:
            return api.client

        return cls(api.store, api.project, client)

    async def ssh_route(self, run: RunRecord, replica: int, job: int) -> SSHRoute:
        return await ssh_route(self.store, self._client, run, replica, job)
