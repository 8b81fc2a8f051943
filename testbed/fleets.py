"""An SSH fleet of the namespaced hosts, served by a worker of its own: where the fleet run tests start."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from activities.ssh_config import DeployOptions
from cli.api import FerryAPI
from cli.dev_environments import ask_connections, dev_views
from cli.fleet_api import FleetAPI
from core.configuration import (
    FleetConfiguration,
    NotARun,
    RunConfiguration,
    parse_configuration,
)
from core.fleets.messages import FleetDescription
from core.fleets.status import FleetStatus
from core.settings import Settings
from store import JobSubmissionRecord, RunRecord, open_store
from testbed.helpers import deploy_options
from testbed.netns import HostNetwork
from worker.main import build_worker, local_instances
from worker.temporal import connect

SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}
WAIT = 60.0  # seconds any one condition may take: generous bounds, never timing assertions
# An agent's first start on a host compiles its bundle: slow on a loaded 2-core machine, three at once.
DEPLOY_WAIT = 240.0
POLL = 0.05


def task(commands: list[str], **fields: Any) -> RunConfiguration:
    conf = parse_configuration({"type": "task", "commands": commands, "resources": SMALL, **fields})
    assert not isinstance(conf, NotARun)
    return conf


def fleet_configuration(network: HostNetwork, name: str, blocks: int = 1) -> FleetConfiguration:
    conf = parse_configuration(
        {
            "type": "fleet",
            "name": name,
            "blocks": blocks,
            "ssh_config": {
                "user": "root",
                "identity_file": str(network.key),
                "hosts": [host.address for host in network.hosts],
            },
        }
    )
    assert isinstance(conf, FleetConfiguration)
    return conf


@dataclass
class Cluster:
    api: FerryAPI
    network: HostNetwork
    repo: Path
    fleet: str
    options: DeployOptions

    @property
    def fleets(self) -> FleetAPI:
        return self.api.fleets()

    async def apply(self, blocks: int = 1) -> FleetDescription:
        await self.fleets.apply(fleet_configuration(self.network, self.fleet, blocks))
        described = await self.fleets.wait_deployed(self.fleet, DEPLOY_WAIT)
        assert described.deployed and not described.pending, described.pending
        return described

    async def submit(self, conf: RunConfiguration, name: str) -> RunRecord:
        return await self.api.submit(conf, repo_dir=self.repo, run_name=name)

    async def finished(self, record: RunRecord) -> RunRecord:
        return await asyncio.wait_for(self.api.wait(record.run_name), WAIT)

    def jobs(self, record: RunRecord) -> list[JobSubmissionRecord]:
        return self.api.store.list_job_submissions(record.id)

    def job(self, record: RunRecord, job: int = 0, submission: int = 0) -> JobSubmissionRecord | None:
        found = [j for j in self.jobs(record) if (j.job_num, j.submission_num) == (job, submission)]
        return found[0] if found else None

    def status(self, record: RunRecord, job: int = 0, submission: int = 0) -> str | None:
        found = self.job(record, job, submission)
        return None if found is None else found.status

    def address_of(self, instance: str | None) -> str:
        found = self.api.store.find_instance(instance or "")
        assert found is not None, instance
        return found.address

    def host_index(self, instance: str | None) -> int:
        address = self.address_of(instance)
        return next(host.index for host in self.network.hosts if host.address == address)

    async def lose_and_recover(self, k: int) -> str:
        """Host k cut off until the fleet finds it unreachable, then back until it is ready: its instance."""
        lost = f"{self.fleet}-{k - 1}"  # the fleet's hosts are the network's, in order
        self.network.cut_host(k)
        try:
            await until("the cut host to be unreachable", lambda: self._has_status(lost, "unreachable"))
        finally:
            self.network.heal_host(k)
        await until("the healed host to be ready", lambda: self._has_status(lost, "ready"))
        return lost

    async def _has_status(self, instance: str, status: str) -> bool:
        described = await self.fleets.describe(self.fleet)
        return any(i.name == instance and i.status == status for i in described.instances)

    async def check_idle(self) -> FleetDescription:
        """Every instance without jobs and nothing waiting: no capacity leaked; the store agrees."""
        described = await until("the fleet to be idle", lambda: self._idle())
        records = self.api.store.list_instances(self.api.project, self.fleet)
        await until("the store to show no busy block", lambda: self._records_idle())
        assert len(records) == len(self.network.hosts)
        return described

    async def _idle(self) -> FleetDescription | None:
        described = await self.fleets.describe(self.fleet)
        return described if described.idle and all(not i.jobs for i in described.instances) else None

    async def _records_idle(self) -> bool:
        records = self.api.store.list_instances(self.api.project, self.fleet)
        return all(r.busy_blocks == 0 and r.jobs == 0 for r in records)


async def user_ssh(tool: str, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The user's own OpenSSH (`ssh`, `scp`), with Ferry's config (`ferry attach` writes it); off the event
    loop the worker runs on."""
    return await asyncio.to_thread(
        subprocess.run,
        [tool, "-F", str(config), "-o", "BatchMode=yes", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        stdin=subprocess.DEVNULL,
    )


async def until_ps_sees_attached(
    api: FerryAPI, config: Path, alias: str, home: Path, record: RunRecord, job: JobSubmissionRecord
) -> None:
    """`ssh -N <alias>` held open (the user's OpenSSH, Ferry's config) until what `ferry ps` asks of the job
    (through the worker, to its agent) counts the connection: the dev environment shows attached."""
    held = subprocess.Popen(
        ["ssh", "-F", str(config), "-o", "BatchMode=yes", "-N", alias],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        async def attached_now() -> bool:
            told = await ask_connections(api.client, [(record, job)])
            return dev_views([(record, [job])], home, told)[record.id].attached

        await until("ps to see the held connection", attached_now)
    finally:
        held.terminate()
        held.wait(WAIT)


async def until(what: str, probe: Any, limit: float = WAIT) -> Any:
    """Poll `probe` (async, or plain) until it gives something truthy; fail after `limit` seconds."""
    deadline = time.monotonic() + limit
    while True:
        found = probe()
        if asyncio.iscoroutine(found):
            found = await found
        if found:
            return found
        assert time.monotonic() < deadline, f"waited {limit:.0f}s for {what}"
        await asyncio.sleep(POLL)


@asynccontextmanager
async def cluster_on(
    network: HostNetwork,
    address: str,
    ferry_home: Path,
    workdir: Path,
    bundle_cache: Path,
    repo: Path,
    **option_changes: object,
) -> AsyncIterator[Cluster]:
    """A worker (with its own SSH pool, `option_changes` to its DeployOptions) on a task queue of its own;
    the fleet is deleted at the end."""
    settings = Settings.from_env({"FERRY_HOME": str(ferry_home)})
    store = open_store(settings.database_url)
    client = await connect(address)
    options = deploy_options(workdir, bundle_cache, **option_changes)
    instances = local_instances(settings, options)
    queue = f"fleet-{uuid.uuid4().hex[:8]}"
    api = FerryAPI(client, store, project=queue, task_queue=queue)
    cluster = Cluster(api, network, repo, f"hosts-{uuid.uuid4().hex[:4]}", options)
    try:
        async with build_worker(client, instances, store, task_queue=queue):
            try:
                yield cluster
            finally:
                record = store.get_fleet(queue, cluster.fleet)
                if record is not None and record.status != FleetStatus.DELETED:
                    await cluster.fleets.delete(cluster.fleet, wait=WAIT)
    finally:
        await instances.aclose()
