"""An elastic fleet's effects on its backend (docs/backends.md): create a group of instances, watch what
the backend says of them, reach their agents, release them. FleetWorkflow decides (core.fleets.growth);
these act, each idempotent: a group is known to its backend by the name the fleet gave it before the call.

The backend's configuration and login key are read from the store at each call (a backend applied again
is used from then on); the key is opened here and nowhere else (store.backend_repository).
"""

from __future__ import annotations

import asyncio
import time

import asyncssh
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.fleet import described_slot
from activities.heartbeats import heartbeating
from activities.instances import InstanceDirectory, UnknownInstance
from activities.slurm_backend import SlurmBackend, SlurmBackendError, SlurmRefused
from activities.ssh_config import DeployOptions
from activities.ssh_tunnel import LocalTunnel
from core.backends.slurm import (
    JobState,
    allocation_request,
    job_name,
    partitions_for,
    pick_partition,
)
from core.backends.slurm_watch import unreachable_news, watch_news
from core.configuration.backend import SlurmBackendConfiguration, SlurmPartition
from core.fleets.growth import CreateGroup, GroupCall, GroupNews, StartGroup, WatchGroups
from core.wire import activity_names as names
from store import Store
from store.backend_repository import open_backend_key
from store.keys import process_keys

WATCH_EVERY = 1.0  # seconds between two looks at the fleet's allocations in `squeue`
FAILURES_TO_LOSE = 3  # looks in a row that fail (the login node silent) make its instances unreachable
WATCH_LIMIT = 10.0  # seconds one look may take before it counts as failed
STARTUP_LIMIT = 120.0  # seconds an allocation's agents may take to announce themselves


class SlurmBackends:
    """This worker's backends, by project and name, each with its login node's connection."""

    def __init__(self, store: Store, instances: InstanceDirectory) -> None:
        self._store = store
        self._instances = instances
        self._backends: dict[tuple[str, str], tuple[float, SlurmBackend]] = {}

    def get(self, project: str, name: str) -> SlurmBackend:
        record = self._store.get_backend(project, name)
        if record is None:
            raise ApplicationError(
                f"project {project} has no backend {name}: apply one (docs/backends.md)",
                type="NoBackend",
                non_retryable=True,
            )
        known = self._backends.get((project, name))
        if known is not None and known[0] == record.updated_at:
            return known[1]
        configuration = SlurmBackendConfiguration.model_validate(record.configuration_data())
        pool = self._instances.pool
        if pool is None:
            raise ApplicationError("this worker has no SSH host pool", type="NoHostPool", non_retryable=True)
        backend = SlurmBackend(
            name, configuration, open_backend_key(process_keys(), record), pool.options, pool.bundle
        )
        self._backends[(project, name)] = (record.updated_at, backend)
        return backend

    async def reach(self, project: str, backend: str, fleet: str, instance: str) -> None:
        """The client of a node's agent this worker has not reached yet (another worker started its group):
        its allocation found by its job name, its node by its rank, its port in its announcement."""
        group, _, rank = instance.removeprefix(f"{fleet}-").rpartition("-")
        slurm = self.get(project, backend)
        try:
            jobs = await slurm.jobs([job_name(project, fleet, group)])
            running = [job for job in jobs if job.meaning[0] == JobState.RUNNING]
            if not running or not rank.isdigit():
                raise UnknownInstance(f"instance {instance!r}: its Slurm allocation is not running")
            nodes = await slurm.node_addresses(running[0].nodes)
            node, address = nodes[int(rank)]
            said, token = await slurm.announcements(job_name(project, fleet, group))
            port = said.get(node, {}).get("port")
            if port is None:
                raise UnknownInstance(f"instance {instance!r}: its agent on {node} has not announced itself")
            self._instances.add(instance, await slurm.client(instance, address, int(port), token))
        except SlurmBackendError as err:
            raise UnknownInstance(f"instance {instance!r}: {err}") from None

    async def tunnel(self, project: str, name: str, address: str, port: int) -> LocalTunnel:
        """A local port carried to address:port beyond the backend's login node, over the login node's one
        connection: a service replica's probes (docs/services.md#replicas-behind-a-login-node). The caller
        closes it."""
        backend = self.get(project, name)
        tunnel = LocalTunnel(backend.connection, lambda: (address, port), _connect_timeout(self._instances))
        await tunnel.start()
        return tunnel

    async def check_port(self, project: str, name: str, address: str, port: int) -> None:
        """Returns once address:port beyond the login node has accepted a connection (then closed); OSError
        saying why when it does not. A local tunnel's port always accepts: this asks the far side."""
        backend = self.get(project, name)
        try:
            conn = await backend.connection()
            _, writer = await asyncio.wait_for(
                conn.open_connection(address, port), _connect_timeout(self._instances)
            )
        except (SlurmBackendError, asyncssh.Error, TimeoutError) as err:
            raise OSError(str(err) or type(err).__name__) from None
        writer.close()

    async def aclose(self) -> None:
        for _, backend in self._backends.values():
            await backend.aclose()


def _connect_timeout(instances: InstanceDirectory) -> float:
    options = instances.pool.options if instances.pool is not None else DeployOptions()
    return options.connect_timeout


class ProvisioningActivities:
    def __init__(self, instances: InstanceDirectory, backends: SlurmBackends) -> None:
        self._instances = instances
        self._backends = backends

    @activity.defn(name=names.CREATE_GROUP)
    async def create_group(self, call: CreateGroup) -> GroupNews:
        """The group asked of the backend (`sbatch`, or the job of its name Slurm already has)."""
        backend = self._backends.get(call.project, call.backend)
        partitions = partitions_for(backend.configuration, call.spot_policy)
        if not partitions:
            kind = "preemptible" if call.spot_policy == "spot" else "non-preemptible"
            policy = call.spot_policy or "on-demand"
            why = f"backend {call.backend} has no {kind} partition for spot_policy {policy}"
            return GroupNews(group=call.group, state="refused", reason=why)
        try:
            async with heartbeating():
                partition = partitions[0]
                if len(partitions) > 1:  # the first that Slurm would start now (`auto`: preemptible first)
                    partition = await self._partition(backend, call, partitions)
                request = allocation_request(
                    backend.configuration, partition, call.resources, name=call.job_name, nodes=call.nodes
                )
                job_id = await backend.submit(request, STARTUP_LIMIT)
        except SlurmRefused as err:
            why = f"backend {call.backend} cannot create {call.nodes} instance(s): {err}"
            return GroupNews(group=call.group, state="refused", reason=why)
        except SlurmBackendError as err:
            raise ApplicationError(str(err), type="BackendUnreachable") from None
        return GroupNews(group=call.group, state="submitted", backend_id=job_id)

    async def _partition(
        self, backend: SlurmBackend, call: CreateGroup, partitions: list[SlurmPartition]
    ) -> SlurmPartition:
        estimates = []
        for partition in partitions:
            request = allocation_request(
                backend.configuration, partition, call.resources, name=call.job_name, nodes=call.nodes
            )
            estimates.append((partition, *await backend.start_estimate(request)))
        chosen, words = pick_partition(estimates)
        if chosen is None:
            raise SlurmRefused(words)
        return chosen

    @activity.defn(name=names.WATCH_GROUPS)
    async def watch_groups(self, call: WatchGroups) -> list[GroupNews]:
        """Until Slurm says something of the fleet's groups that the fleet does not know yet."""
        backend = self._backends.get(call.project, call.backend)
        names = sorted(name for name, _ in call.groups.values())
        failures = 0
        async with heartbeating():
            while True:
                try:
                    jobs = await asyncio.wait_for(backend.jobs(names), WATCH_LIMIT)
                except (SlurmBackendError, TimeoutError) as err:
                    failures += 1
                    if failures >= FAILURES_TO_LOSE and (lost := unreachable_news(call, str(err))):
                        return lost
                else:
                    failures = 0
                    news = watch_news(call, jobs)
                    if news:
                        return news
                await asyncio.sleep(WATCH_EVERY)

    @activity.defn(name=names.START_GROUP)
    async def start_group(self, call: StartGroup) -> GroupNews:
        """The group's agents reached (each announces its port once it listens); its instances as their
        agents describe them. A node whose agent could not start ends the group with its reason."""
        backend = self._backends.get(call.project, call.backend)
        async with heartbeating():
            return await self._start_group(call, backend)

    async def _start_group(self, call: StartGroup, backend: SlurmBackend) -> GroupNews:
        try:
            fields = await backend.job_fields(call.backend_id)
            nodes = await backend.node_addresses(fields.get("NodeList", ""))
            deadline = time.monotonic() + STARTUP_LIMIT
            while True:
                said, token = await backend.announcements(call.job_name)
                errors = [
                    f"{node}: {said[node]['error']}" for node, _ in nodes if "error" in said.get(node, {})
                ]
                if errors:
                    return _start_failed(call, backend, "; ".join(errors))
                if all("port" in said.get(node, {}) for node, _ in nodes):
                    break
                if time.monotonic() > deadline:
                    missing = [node for node, _ in nodes if node not in said]
                    return _start_failed(call, backend, f"no agent answered on {', '.join(missing)}")
                await asyncio.sleep(0.5)
            slots = []
            for instance, (node, address) in zip(call.instances, nodes, strict=False):
                client = await backend.client(instance, address, int(said[node]["port"]), token)
                self._instances.add(instance, client)
                slots.append(await described_slot(client, instance, address, call.blocks, call.fleet))
        except SlurmBackendError as err:
            raise ApplicationError(str(err), type="BackendUnreachable") from None
        return GroupNews(group=call.group, state="ready", backend_id=call.backend_id, slots=slots)

    @activity.defn(name=names.RELEASE_GROUP)
    async def release_group(self, call: GroupCall) -> GroupNews:
        """The group given back (`scancel` of its name) and its directory removed, once Slurm has ended it."""
        backend = self._backends.get(call.project, call.backend)
        try:
            await backend.cancel(call.job_name)
            async with heartbeating():
                while any(job.meaning[0] != JobState.ENDED for job in await backend.jobs([call.job_name])):
                    await asyncio.sleep(0.5)
            await backend.remove_group(call.job_name)
        except SlurmBackendError as err:
            raise ApplicationError(str(err), type="BackendUnreachable") from None
        for name in [n for n in self._instances.names() if n.startswith(f"{call.fleet}-{call.group}-")]:
            self._instances.forget(name)
            backend.forget(name)
        return GroupNews(group=call.group, state="released")


def _start_failed(call: StartGroup, backend: SlurmBackend, why: str) -> GroupNews:
    return GroupNews(
        group=call.group, state="refused", reason=f"backend {backend.name}: the agent did not start: {why}"
    )
