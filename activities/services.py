"""Service activities (docs/services.md): a replica's registration and probes, its drain, the load watch.

- `probe_replica` registers a running replica in the store (where every proxy reads it) and probes it
  until its state changes: ready once its probes pass, unready when one fails after that. The job
  workflow logs each change and calls it again; a lost worker's attempt is retried elsewhere (heartbeats).
  A replica on a backend's compute node is registered with `via` (the backend's id) and probed through
  the backend's login node, as the proxies reach it (docs/services.md#replicas-behind-a-login-node).
  A ready replica of a service's router group also keeps its router's workers in step with the other
  groups' ready replicas (activities.service_router); a change, or what the router refuses, is returned
  once as the readiness' detail, which the job logs.
- `drain_replica` takes the replica out of rotation and waits until every live proxy says it has no
  request in flight to it, so that stopping its job cuts none.
- `unregister_replica` removes it once its job has ended.
- `watch_load` measures a service's request rate (every proxy's counts, in the store) until the
  autoscaler's rule (core.services.autoscaler) wants another replica count.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.agent_client import AgentError
from activities.handover import hands_over
from activities.heartbeats import heartbeating
from activities.instances import InstanceDirectory
from activities.service_router import SYNC_EVERY, RouterSync
from activities.ssh_tunnel import LocalTunnel
from core.backends.slurm import slurm_backend_name
from core.configuration.service import ProbeSpec
from core.services.autoscaler import desired_replicas
from core.services.probes import PORT_PROBE, ProbeStatus, replica_state
from core.services.routers import RouterNote, next_note, router_address
from core.status import JobTerminationReason
from core.wire import activity_names as names
from core.wire.services import (
    DrainReplica,
    DrainResult,
    LoadChange,
    ProbeReplica,
    ReplicaReadiness,
    ReplicaState,
    RouterAddressRequest,
    WatchLoad,
)
from store import ServiceReplicaRecord, Store
from store.backend_repository import backend_id

# How often an unready probe runs: faster than `interval` (dstack's default is 15 s) until the replica is
# first ready, so that a replica gets traffic (a request held while scaling from zero is answered) well
# within a second of its port opening. Once passed, a probe runs at its own `interval`.
PROBE_UNTIL_READY_EVERY = 0.1
PORT_PROBE_EVERY = 1.0  # the port check of a service with no probes, once ready
PORT_PROBE_TIMEOUT = 2.0
# A proxy not heard from for this long is gone: a drain does not wait for it.
GATEWAY_SILENT_AFTER = 5.0
DRAIN_POLL = 0.05
LOAD_POLL = 0.5
ROUTER_POLL = 0.5  # a Dynamo worker's look for its router replica's address


class LoginNodes(Protocol):
    """The backends' login nodes as this worker reaches them (activities.provisioning.SlurmBackends)."""

    async def tunnel(self, project: str, name: str, address: str, port: int) -> LocalTunnel: ...

    async def check_port(self, project: str, name: str, address: str, port: int) -> None: ...


@dataclass(frozen=True)
class ProbeRoute:
    """Where this worker sends a replica's probes: `url` for HTTP ones, `port_open` for the port check."""

    url: str
    port_open: Callable[[], Awaitable[None]]  # returns once the replica's port accepted a connection


class ServiceActivities:
    def __init__(
        self,
        instances: InstanceDirectory,
        store: Store,
        *,
        load_poll: float = LOAD_POLL,
        login_nodes: LoginNodes | None = None,
    ) -> None:
        self._instances = instances
        self._store = store
        self._load_poll = load_poll
        self._login_nodes = login_nodes
        self._router_notes: dict[str, RouterNote] = {}  # router replica id -> the last line returned

    @activity.defn(name=names.PROBE_REPLICA)
    async def probe_replica(self, request: ProbeReplica) -> ReplicaReadiness:
        async with heartbeating():
            url = await self._replica_url(request)
            via = await asyncio.to_thread(self._via, request.instance_name)
            record = await asyncio.to_thread(self._register, request, url, via)
            probes = list(request.service.probes)
            statuses = _statuses(probes, record)
            state = ReplicaState(record.state)
            due = [0.0] * len(statuses)
            async with self._probe_route(url, via) as route, httpx.AsyncClient() as http:
                router = self._router_sync(request, route.url)
                synced_at = 0.0
                while True:
                    now = time.monotonic()
                    ready = [i for i, at in enumerate(due) if now >= at]
                    results = await asyncio.gather(*(_probe(http, route, probes, i) for i in ready))
                    for i, (ok, result) in zip(ready, results, strict=True):
                        statuses[i] = statuses[i].after(ok, result)
                        due[i] = time.monotonic() + _interval(probes, i, statuses[i])
                    new = replica_state(state, statuses)
                    if ready:
                        encoded = json.dumps([s.model_dump() for s in statuses])
                        kept = await asyncio.to_thread(
                            self._store.set_replica_state, request.job_submission_id, new, encoded
                        )
                        if not kept:  # draining or unregistered: its job no longer follows the probes
                            return ReplicaReadiness(state=ReplicaState.DRAINING, detail="no longer probed")
                    state = new
                    if state != request.known:
                        return ReplicaReadiness(state=state, detail=_detail(probes, statuses))
                    wake = min(due)
                    if router is not None and state == ReplicaState.READY:
                        if time.monotonic() - synced_at >= SYNC_EVERY:
                            synced_at = time.monotonic()
                            step = await router.step(http)
                            last = self._router_notes.get(request.job_submission_id)
                            if step.trouble is None and last is not None and last.trouble:
                                # It went well: the same trouble coming back is logged again (not
                                # sooner than TROUBLE_EVERY after the last, should the router flap).
                                last = self._router_notes[request.job_submission_id] = RouterNote(
                                    line="", at=last.at, trouble=True
                                )
                            note = next_note(last, step.summary(), step.trouble is not None, time.time())
                            if note is not None:
                                self._router_notes[request.job_submission_id] = note
                                return ReplicaReadiness(state=state, detail=note.line)
                        wake = min(wake, synced_at + SYNC_EVERY)
                    await asyncio.sleep(max(wake - time.monotonic(), 0.01))

    @activity.defn(name=names.DRAIN_REPLICA)
    async def drain_replica(self, request: DrainReplica) -> DrainResult:
        replica_id = request.job_submission_id
        started = time.monotonic()
        async with heartbeating():
            found = await asyncio.to_thread(self._store.set_replica_state, replica_id, ReplicaState.DRAINING)
            if not found:
                return DrainResult(drained=True, waited=0)
            while True:
                pending = await asyncio.to_thread(self._undrained_by, replica_id)
                waited = time.monotonic() - started
                if not pending:
                    return DrainResult(drained=True, waited=waited)
                if waited >= request.grace:
                    return DrainResult(drained=False, waited=waited, pending=sorted(pending))
                await asyncio.sleep(DRAIN_POLL)

    @activity.defn(name=names.UNREGISTER_REPLICA)
    async def unregister_replica(self, job_submission_id: str) -> None:
        self._router_notes.pop(job_submission_id, None)
        await asyncio.to_thread(self._store.remove_replica, job_submission_id)

    @activity.defn(name=names.ROUTER_ADDRESS)
    @hands_over
    async def router_address(self, request: RouterAddressRequest) -> str:
        """Once the run's router replica runs (its probes have begun): the address its url names, where the
        proxies reach it (docs/services.md#a-dynamo-router)."""
        async with heartbeating():
            while True:
                records = await asyncio.to_thread(self._store.list_service_replicas, [request.run_id])
                registered = ((r.group_name, r.state, r.url) for r in records)
                found = router_address(registered, request.router_group)
                if found is not None:
                    return found
                if time.time() > request.not_after:
                    raise ApplicationError(
                        f"the router replica (group {request.router_group}) has not run: a worker does not "
                        "start without its address",
                        type=JobTerminationReason.TERMINATED_BY_SERVER.name,
                        non_retryable=True,
                    )
                await asyncio.sleep(ROUTER_POLL)

    @activity.defn(name=names.WATCH_LOAD)
    @hands_over
    async def watch_load(self, request: WatchLoad) -> LoadChange:
        rule = request.rule
        async with heartbeating():
            while True:
                now = time.time()
                count = await asyncio.to_thread(
                    self._store.request_count, request.run_id, int(now - rule.window)
                )
                rps = count / rule.window
                desired = desired_replicas(
                    rule, current=request.current, rps=rps, last_change_at=request.last_change_at, now=now
                )
                if desired != request.current:
                    return LoadChange(desired=desired, rps=round(rps, 3))
                await asyncio.sleep(self._load_poll)

    # --- helpers ----------------------------------------------------------------------------------

    async def _replica_url(self, request: ProbeReplica) -> str:
        """Where the proxies reach the replica: its task's own address (an isolated network), else its
        instance's; at the host port its container's port is published on (a bridge network), else the
        service's port."""
        address: str | None = None
        port = request.service.port
        client = await self._instances.resolve(request.instance_name)
        try:
            task = await client.get_task(request.job_submission_id)
        except AgentError:
            task = None
        if task is not None:
            address = task.address
            port = next((p.host_port for p in task.ports if p.container_port == port), port)
        if address is None:
            instance = await asyncio.to_thread(self._store.find_instance, request.instance_name)
            address = instance.address if instance is not None and instance.address else "127.0.0.1"
        return f"http://{address}:{port}"

    def _router_sync(self, request: ProbeReplica, url: str) -> RouterSync | None:
        """The router's worker sync, for a replica of the service's router group (None for any other)."""
        service = request.service
        if not service.syncs_router() or service.router_group is None:
            return None
        return RouterSync(self._store, request.run_id, service.router_group, url)

    def _via(self, instance_name: str) -> str | None:
        """The backend whose login node reaches the instance (a node of an elastic fleet's allocation), by
        its id; None for an instance reached directly (docs/backends.md)."""
        instance = self._store.find_instance(instance_name)
        fleet = None if instance is None else self._store.get_fleet(instance.project, instance.fleet)
        backend = None if fleet is None else slurm_backend_name(fleet.backend)
        return None if fleet is None or backend is None else backend_id(fleet.project, backend)

    @contextlib.asynccontextmanager
    async def _probe_route(self, url: str, via: str | None) -> AsyncIterator[ProbeRoute]:
        """Probes go straight to `url`, or (with `via`) through the backend's login node: HTTP ones over a
        local tunnel on its connection, kept while this activity probes; the port check as a channel of
        that connection, since the tunnel's own port always accepts."""
        target = urlsplit(url)
        host, port = target.hostname or "127.0.0.1", target.port or 80
        if via is None or self._login_nodes is None:
            yield ProbeRoute(url, lambda: _port_open(host, port))
            return
        project, _, name = via.partition("/")
        login_nodes = self._login_nodes
        tunnel = await login_nodes.tunnel(project, name, host, port)
        try:
            yield ProbeRoute(
                f"http://127.0.0.1:{tunnel.port}", lambda: login_nodes.check_port(project, name, host, port)
            )
        finally:
            tunnel.close()

    def _register(self, request: ProbeReplica, url: str, via: str | None) -> ServiceReplicaRecord:
        """The replica's record, registered now unless an earlier attempt did."""
        stored = self._store.get_replica(request.job_submission_id)
        group = request.service.group
        if stored is not None and stored.url == url and stored.via == via and stored.group_name == group:
            return stored
        record = ServiceReplicaRecord(
            id=request.job_submission_id,
            run_id=request.run_id,
            replica_num=request.replica_num,
            submission_num=request.submission_num,
            deployment_num=request.service.deployment_num,
            url=url,
            via=via,
            group_name=group,
            state=request.known,
        )
        self._store.register_replica(record)
        return record

    def _undrained_by(self, replica_id: str) -> set[str]:
        live = {g.id for g in self._store.live_gateways(time.time() - GATEWAY_SILENT_AFTER)}
        return live - self._store.drained_by(replica_id)


def _statuses(probes: list[ProbeSpec], record: ServiceReplicaRecord) -> list[ProbeStatus]:
    """The probes' statuses as an earlier attempt stored them, or fresh ones."""
    fresh = [ProbeStatus(url=p.url, ready_after=p.ready_after) for p in probes] or [
        ProbeStatus(url=PORT_PROBE)
    ]
    try:
        stored = [ProbeStatus.model_validate(s) for s in json.loads(record.probes)]
    except (ValueError, TypeError):
        return fresh
    same = [(s.url, s.ready_after) for s in stored] == [(s.url, s.ready_after) for s in fresh]
    return stored if same else fresh


def _interval(probes: list[ProbeSpec], index: int, status: ProbeStatus) -> float:
    if not status.passed:
        return PROBE_UNTIL_READY_EVERY
    return float(probes[index].interval) if probes else PORT_PROBE_EVERY


async def _probe(
    http: httpx.AsyncClient, route: ProbeRoute, probes: list[ProbeSpec], index: int
) -> tuple[bool, str]:
    """One probe's result: (passed, what happened)."""
    if not probes:
        try:
            await asyncio.wait_for(route.port_open(), PORT_PROBE_TIMEOUT)
        except (OSError, TimeoutError) as err:
            return False, _short(err)
        return True, "port open"
    probe = probes[index]
    url = route.url
    headers = {h.name: h.value for h in probe.headers}
    try:
        response = await http.request(
            probe.method.upper(), url + probe.url, headers=headers, content=probe.body, timeout=probe.timeout
        )
    except httpx.TimeoutException:
        return False, f"no answer in {probe.timeout}s"
    except httpx.HTTPError as err:
        return False, _short(err)
    return 200 <= response.status_code < 400, str(response.status_code)


async def _port_open(host: str, port: int) -> None:
    _, writer = await asyncio.open_connection(host, port)
    writer.close()


def _short(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text.splitlines()[0][:120]


def _detail(probes: list[ProbeSpec], statuses: list[ProbeStatus]) -> str:
    if not probes:
        return f"port: {statuses[0].last}"
    return "; ".join(f"{p.method.upper()} {p.url}: {s.last}" for p, s in zip(probes, statuses, strict=True))
