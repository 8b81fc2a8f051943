"""A real Slurm cluster for the session (testbed/slurm_cluster.py): a login host reached over SSH and three
compute hosts, in network namespaces; skipped where it cannot run (not root, or Slurm/munge missing). And
`stack`: a worker and a project with that cluster as its Slurm backend, for one test."""

from __future__ import annotations

import asyncio
import io
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from cli.api import FerryAPI
from cli.backend_api import record_backend
from core.backends.slurm import fleet_prefix
from core.configuration import FleetConfiguration, SlurmBackendConfiguration, parse_configuration
from core.fleets.status import FleetStatus
from core.settings import Settings
from store import open_store
from testbed.fleets import until
from testbed.helpers import deploy_options, leftover_processes
from testbed.slurm_cluster import SlurmCluster, missing_tools
from worker.main import build_worker, local_instances
from worker.temporal import connect


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    if os.geteuid() != 0:
        pytest.skip("a Slurm cluster in network namespaces needs root")
    if missing := missing_tools():
        pytest.skip(f"missing {', '.join(missing)}: install slurm-wlm and munge (scripts/test.sh does)")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).up()
    yield cluster
    cluster.down()
    assert cluster.namespaces() == []
    assert cluster.processes() == []
    assert leftover_processes(cluster.workdir) == []


def wait_no_jobs(cluster: SlurmCluster, timeout: float = 60.0) -> None:
    """Until squeue shows no job that is not finished (a cancelled one completes in a few seconds)."""
    deadline = time.monotonic() + timeout
    while jobs := cluster.jobs(finished=False):
        if time.monotonic() > deadline:
            raise AssertionError(f"squeue is not empty after the test: {jobs}")
        time.sleep(0.2)


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster; after the test, squeue must be empty (tests scancel what they submit)."""
    yield slurm_cluster
    wait_no_jobs(slurm_cluster)


ALLOCATION_WAIT = 180.0  # an allocation, then its agent's first start (bundle unpacked) on a loaded machine
NODE = {"cpu": 1, "memory": "1GB", "disk": "0GB.."}


@dataclass
class SlurmStack:
    api: FerryAPI
    slurm: SlurmCluster
    repo: Path
    fleet: str
    workers: AsyncExitStack
    start_worker: Callable[[], Awaitable[None]]

    async def restart_worker(self) -> None:
        """The worker stopped (its activities cancelled, its tunnels and clients gone), and a new one with
        an empty instance directory started in its place."""
        await self.workers.aclose()
        await self.start_worker()

    def fleet_configuration(self, **fields: object) -> FleetConfiguration:
        conf = parse_configuration({"type": "fleet", "name": self.fleet, "resources": NODE} | fields)
        assert isinstance(conf, FleetConfiguration)
        return conf

    def our_jobs(self) -> list[dict[str, str]]:
        prefix = fleet_prefix(self.api.project, self.fleet)
        return [job for job in self.slurm.jobs(finished=False) if job["name"].startswith(prefix)]


@pytest_asyncio.fixture
async def stack(
    slurm: SlurmCluster,
    temporal_address: str,  # noqa: F811
    ferry_home: Path,  # noqa: F811
    tmp_path: Path,
) -> AsyncIterator[SlurmStack]:
    settings = Settings.from_env({"FERRY_HOME": str(ferry_home)})
    store = open_store(settings.database_url)
    client = await connect(temporal_address)
    bundles = tmp_path / "bundles"
    queue = f"slurm-{uuid.uuid4().hex[:8]}"
    api = FerryAPI(client, store, project=queue, task_queue=queue)
    backend = SlurmBackendConfiguration.model_validate(slurm.backend(tmp_path / "shared"))
    record_backend(store, queue, backend, slurm.login.identity_file.read_text())
    repo = tmp_path / "repo"
    repo.mkdir()

    async def start_worker() -> None:
        made.workers = AsyncExitStack()
        instances = local_instances(settings, deploy_options(tmp_path, bundles))
        made.workers.push_async_callback(instances.aclose)
        await made.workers.enter_async_context(build_worker(client, instances, store, task_queue=queue))

    made = SlurmStack(api, slurm, repo, f"hpc-{uuid.uuid4().hex[:4]}", AsyncExitStack(), start_worker)
    await start_worker()
    try:
        yield made
        record = store.get_fleet(queue, made.fleet)
        if record is not None and record.status != FleetStatus.DELETED:
            await api.fleets().delete(made.fleet, wait=ALLOCATION_WAIT)
        await until("the fleet's Slurm jobs to end", lambda: not made.our_jobs(), ALLOCATION_WAIT)
    finally:
        await stop_workers(made.workers)
        await asyncio.to_thread(wait_no_jobs, slurm)


WORKER_STOP = 120.0


async def stop_workers(workers: AsyncExitStack) -> None:
    """The test's workers stopped; if that hangs (seen once, under load, in a full run: the test's teardown
    waited for ever with no thread busy), a failure naming what was still awaited, not a suite that never
    ends."""
    try:
        await asyncio.wait_for(workers.aclose(), WORKER_STOP)
    except TimeoutError:
        stacks = io.StringIO()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.print_stack(limit=12, file=stacks)
        raise AssertionError(
            f"the worker did not stop in {WORKER_STOP:.0f} s; still awaited:\n{stacks.getvalue()}"
        ) from None


from tests.lifecycle.conftest import ferry_home, temporal_address  # noqa: E402, F401
