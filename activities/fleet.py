"""The fleet scheduler's effects: deploying instances, watching their health, records, and the end.

FleetWorkflow (workflows/fleet.py) decides; these act. SSH hosts are deployed through the worker's
HostPool (activities.ssh), whose new clients join the worker's InstanceDirectory; the local instance is
the worker's own agent. Every activity is idempotent: deploying twice keeps the running agent.

Health: `watch_fleet_health` checks every ready instance's agent every CHECK_EVERY seconds (a failed check
is repeated after RECHECK_AFTER); FAILURES_TO_LOSE failures in a row make it unreachable. Unreachable
instances (and hosts never deployed) are deployed again every REDEPLOY_EVERY seconds until one works. A
check also reads what the agent says its instance is (hardware, engine, release): when that is not what the
fleet knows, the instance is reported READY with its new slot (docs/fleets.md#what-an-instance-is), as
`watch_local_instance` does for this machine's agent. Each returns as soon as something changed, and the
workflow starts it again with the new view.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Literal, Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.agent_client import AgentClient, AgentUnreachable
from activities.handover import hands_over
from activities.heartbeats import heartbeating
from activities.instances import LOCAL_INSTANCE, InstanceDirectory, UnknownInstance
from activities.jobs import remove_task
from activities.ssh import HostPool
from activities.ssh_config import SSHTarget, ssh_targets
from core.backends.slurm import slurm_backend_name
from core.configuration import FleetConfiguration
from core.fleets.messages import (
    CleanInstance,
    DeployInstance,
    HealthReport,
    InstanceChange,
    LocalInstance,
    RecordFleet,
    StopFleet,
    WatchFleet,
    WatchLocal,
)
from core.fleets.placement import InstanceSlot, InstanceStatus
from core.fleets.scheduling import slot_from_info
from core.fleets.status import FleetStatus
from core.wire import activity_names as names
from store import InstanceRecord, RecordNotFoundError, Store
from store.fleet_repository import instance_id

CHECK_EVERY = 1.5
CHECK_TIMEOUT = 1.5
RECHECK_AFTER = 0.5
FAILURES_TO_LOSE = 2  # a lost host is noticed within about 5 s (CHECK_EVERY + 2 checks + RECHECK_AFTER)
REDEPLOY_EVERY = 2.0
DEPLOY_LIMIT = 120.0  # seconds one deployment may take, the bundle's upload included
STOP_LIMIT = 30.0
_BEAT = 0.5
_GATHER = 0.2  # changes noticed together are reported together

LOCAL_ADDRESS = "127.0.0.1"


def _not_ssh() -> ApplicationError:
    return ApplicationError("this worker has no SSH host pool", type="NoHostPool", non_retryable=True)


async def described_slot(
    client: AgentClient, name: str, address: str, blocks: int | Literal["auto"] | None, fleet: str
) -> InstanceSlot:
    """The instance as its agent describes it now: what it has (instance info), its release (healthcheck)."""
    info, health = await asyncio.gather(client.instance_info(), client.healthcheck())
    return slot_from_info(name, address, info, blocks=blocks, fleet=fleet, agent_release=health.version)


async def local_slot(instances: InstanceDirectory, fleet: str) -> InstanceSlot:
    """This machine's instance, shared by exact needs (no blocks)."""
    return await described_slot(instances.client(LOCAL_INSTANCE), LOCAL_INSTANCE, LOCAL_ADDRESS, None, fleet)


class FleetActivities:
    def __init__(self, instances: InstanceDirectory, store: Store) -> None:
        self._instances = instances
        self._store = store

    @property
    def _pool(self) -> HostPool:
        if self._instances.pool is None:
            raise _not_ssh()
        return self._instances.pool

    # --- instances ---------------------------------------------------------------------------------------

    @activity.defn(name=names.LOCAL_INSTANCE)
    async def local_instance(self, request: LocalInstance) -> InstanceSlot:
        """This machine's agent as the local fleet's one instance, shared by exact needs (no blocks)."""
        return await local_slot(self._instances, request.fleet)

    @activity.defn(name=names.WATCH_LOCAL_INSTANCE)
    @hands_over
    async def watch_local_instance(self, request: WatchLocal) -> HealthReport:
        """Until this machine's agent describes its instance otherwise than the fleet knows it. An agent
        that does not answer is waited for: the stack starts it again (this machine is never lost)."""
        async with heartbeating():
            while True:
                try:
                    slot = await asyncio.wait_for(local_slot(self._instances, request.fleet), CHECK_TIMEOUT)
                except Exception as err:  # any failure: asked again at the next check
                    activity.logger.debug("the local agent did not describe its instance: %s", err)
                else:
                    if slot.description_key() != request.described:
                        change = InstanceChange(name=LOCAL_INSTANCE, status=InstanceStatus.READY, slot=slot)
                        return HealthReport(changes=[change])
                await asyncio.sleep(CHECK_EVERY)

    @activity.defn(name=names.DEPLOY_INSTANCE)
    async def deploy_instance(self, request: DeployInstance) -> InstanceSlot:
        """The agent deployed and started on one host of an SSH fleet; its resources as the host reports."""
        target = ssh_targets(request.configuration, request.fleet)[request.index]
        async with heartbeating():
            return await self._deploy(target, request.fleet)

    async def _deploy(self, target: SSHTarget, fleet: str) -> InstanceSlot:
        pool = self._pool
        deployed = await pool.deploy(target)
        return await self._host_slot(target, deployed.address, fleet)

    async def _host_slot(self, target: SSHTarget, address: str, fleet: str) -> InstanceSlot:
        """The host's instance as its agent describes it now."""
        return await described_slot(
            self._pool.client(target.name), target.name, address, target.blocks, fleet
        )

    @activity.defn(name=names.CLEAN_INSTANCE)
    async def clean_instance(self, request: CleanInstance) -> None:
        """Remove the tasks of jobs that failed when the instance was lost: it is back, they are not."""
        client = await self._instances.resolve(request.instance)
        async with heartbeating():
            for job_id in request.job_ids:
                with contextlib.suppress(AgentUnreachable):
                    await remove_task(client, job_id)

    # --- health ------------------------------------------------------------------------------------------

    @activity.defn(name=names.WATCH_FLEET_HEALTH)
    @hands_over
    async def watch_fleet_health(self, request: WatchFleet) -> HealthReport:
        """Until an instance changes: a ready one stops answering, or an unreachable one is deployed again."""
        targets = {target.name: target for target in ssh_targets(request.configuration, request.fleet)}
        changes: list[InstanceChange] = []
        changed = asyncio.Event()

        def report(change: InstanceChange) -> None:
            changes.append(change)
            changed.set()

        watchers = [
            asyncio.create_task(self._watch_ready(targets[name], request, report))
            for name in request.ready
            if name in targets
        ]
        watchers += [
            asyncio.create_task(self._redeploy(targets[name], request.fleet, report))
            for name in request.unreachable
            if name in targets
        ]
        try:
            while not changed.is_set():
                activity.heartbeat()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), _BEAT)
            await asyncio.sleep(_GATHER)
            return HealthReport(changes=list(changes))
        finally:
            for watcher in watchers:
                watcher.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)

    async def _watch_ready(
        self, target: SSHTarget, request: WatchFleet, report: Callable[[InstanceChange], None]
    ) -> None:
        failures = 0
        known = request.described.get(target.name)
        while True:
            problem = await self._check(target)
            if problem is None:
                failures = 0
                fleet = request.fleet
                slot = None if known is None else await self._described_otherwise(target, fleet, known)
                if slot is not None:
                    report(InstanceChange(name=target.name, status=InstanceStatus.READY, slot=slot))
                    return
                await asyncio.sleep(CHECK_EVERY)
                continue
            failures += 1
            if failures >= FAILURES_TO_LOSE:
                report(InstanceChange(name=target.name, status=InstanceStatus.UNREACHABLE, note=problem))
                return
            await asyncio.sleep(RECHECK_AFTER)

    async def _described_otherwise(self, target: SSHTarget, fleet: str, known: str) -> InstanceSlot | None:
        """The host's instance as its agent describes it now, if that is not what the fleet knows (`known`,
        its description_key); None when it is, or when the agent did not say (the next check asks again)."""
        try:
            address = self._pool.host(target.name).address
            slot = await asyncio.wait_for(self._host_slot(target, address, fleet), CHECK_TIMEOUT)
        except Exception as err:
            activity.logger.debug("%s did not describe its instance: %s", target.name, err)
            return None
        return None if slot.description_key() == known else slot

    async def _check(self, target: SSHTarget) -> str | None:
        """Why the host's agent is not healthy now; None when it answers."""
        pool = self._pool
        if target.name not in pool.names():  # this worker has not reached it yet: the agent is kept
            try:
                await asyncio.wait_for(pool.deploy(target), DEPLOY_LIMIT)
            except Exception as err:
                return " ".join(str(err).split())[:300] or type(err).__name__
        if await pool.healthy(target.name, timeout=CHECK_TIMEOUT):
            return None
        return f"its agent did not answer within {CHECK_TIMEOUT:g}s"

    async def _redeploy(
        self, target: SSHTarget, fleet: str, report: Callable[[InstanceChange], None]
    ) -> None:
        while True:
            try:
                slot = await asyncio.wait_for(self._deploy(target, fleet), DEPLOY_LIMIT)
            except Exception as err:
                activity.logger.debug("%s is still unreachable: %s", target.name, err)
                await asyncio.sleep(REDEPLOY_EVERY)
                continue
            report(InstanceChange(name=target.name, status=InstanceStatus.READY, slot=slot))
            return

    # --- records and the end -----------------------------------------------------------------------------

    @activity.defn(name=names.RECORD_FLEET)
    async def record_fleet(self, request: RecordFleet) -> None:
        await asyncio.to_thread(self._record, request)

    def _record(self, request: RecordFleet) -> None:
        now = time.time()
        records = [
            InstanceRecord(
                id=instance_id(request.project, view.name),
                project=request.project,
                fleet=request.fleet,
                name=view.name,
                address=view.address,
                status=view.status,
                status_message=view.message,
                resources=view.total.model_dump_json(),
                blocks=view.blocks,
                busy_blocks=view.busy_blocks,
                jobs=view.jobs,
                in_use=view.in_use.model_dump_json(),
                description=view.model_dump_json(include={"hardware", "container_engine", "agent_release"}),
                updated_at=now,
            )
            for view in request.instances
        ]
        self._store.put_instances(request.project, request.fleet, records)
        if request.waiting is not None:
            self._store.put_queue(request.project, request.fleet, request.waiting, request.why)
        with contextlib.suppress(RecordNotFoundError):
            self._store.update_fleet(request.project, request.fleet, status=request.status, updated_at=now)

    @activity.defn(name=names.STOP_FLEET)
    async def stop_fleet(self, request: StopFleet) -> None:
        """A deleted fleet: its hosts' agents stopped (those that can be reached), its records deleted."""
        if request.configuration is not None:
            targets = ssh_targets(request.configuration, request.fleet)
            async with heartbeating():
                await asyncio.gather(*(self._stop(target) for target in targets))
        deleted = RecordFleet(
            project=request.project, fleet=request.fleet, status=FleetStatus.DELETED, instances=[], waiting=[]
        )
        await asyncio.to_thread(self._record, deleted)

    async def _stop(self, target: SSHTarget) -> None:
        self._instances.forget(target.name)
        try:
            await asyncio.wait_for(self._pool.stop(target), STOP_LIMIT)
        except Exception as err:
            activity.logger.warning("the agent of %s was not stopped: %s", target.name, err)


class SlurmNodes(Protocol):
    async def reach(self, project: str, backend: str, fleet: str, instance: str) -> None: ...


class InstanceResolver:
    """Finds an SSH instance this worker has not deployed: its record, its fleet's configuration, then
    a deployment through the pool (which keeps the running agent and hands its client to the directory)."""

    def __init__(
        self, instances: InstanceDirectory, store: Store, backends: SlurmNodes | None = None
    ) -> None:
        self._instances = instances
        self._store = store
        self._backends = backends

    async def __call__(self, name: str) -> None:
        record = await asyncio.to_thread(self._store.find_instance, name)
        fleet = (
            None
            if record is None
            else await asyncio.to_thread(self._store.get_fleet, record.project, record.fleet)
        )
        backend = None if fleet is None else slurm_backend_name(fleet.backend)
        if fleet is not None and backend is not None and self._backends is not None:
            # A node of an allocation another worker reached (docs/backends.md#how-an-instance-is-made).
            await self._backends.reach(fleet.project, backend, fleet.name, name)
            return
        if record is None or fleet is None or fleet.backend != "ssh" or self._instances.pool is None:
            raise UnknownInstance(f"instance {name!r} is not known to this worker, nor to the store")
        configuration = FleetConfiguration.model_validate_json(fleet.configuration)
        targets = [t for t in ssh_targets(configuration, fleet.name) if t.name == name]
        if not targets:
            raise UnknownInstance(f"instance {name!r} is no longer in fleet {fleet.name}")
        await self._instances.pool.deploy(targets[0])
