"""An SSH fleet of three hosts, each on another Debian release's own Python: 11 bullseye (3.9), 12 bookworm
(3.11, the worker's version) and 13 trixie (3.13). Each host's sshd runs chrooted into a root of its release
(testbed/debian_roots.py, built once per machine), so the worker deploys on each the agent bundle for that
Python (activities/agent_bundle.py: wheels for 3.9 and 3.13, its own packages for 3.11) and the agent runs
on the release's /usr/bin/python3. One fleet for the module: a task across the three with its ranks and
master's address, a host lost and back, and SSH into a job through a 3.9 host (as `ferry attach` sets up)."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from rich.console import Console

from cli.api import FerryAPI
from cli.attach import attach
from cli.ssh_routes import DirectRoutes
from cli.user_keys import public_key_line
from core.configuration import DevEnvironmentConfiguration, ServiceConfiguration, parse_configuration
from core.status import RunStatus
from store import ServiceReplicaRecord
from testbed.debian_roots import PYTHONS, debian_root, root_python
from testbed.fleets import SMALL, Cluster, cluster_on, task, until, user_ssh
from testbed.helpers import leftover_processes
from testbed.netns import HostNetwork

pytestmark = pytest.mark.asyncio(loop_scope="module")

SUITES = ("bullseye", "bookworm", "trixie")  # hosts 1, 2 and 3
SAY_PYTHON = "python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'"


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostNetwork]:
    """The fleet conftest's three hosts, each chrooted into its release's root; they see this run's
    temporary directories (their remote dirs, the tests' files) at the same paths as this machine."""
    with ThreadPoolExecutor(len(SUITES)) as builds:  # only on a machine that has none yet: minutes each
        roots = list(builds.map(debian_root, SUITES))
    workdir = tmp_path_factory.mktemp("netns")
    net = HostNetwork(3, workdir, roots=roots, shared=[tmp_path_factory.getbasetemp()]).up()
    yield net
    net.down()
    assert net.namespaces() == []
    assert leftover_processes(net.workdir) == []


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fleet(
    network: HostNetwork,
    temporal_address: str,
    ferry_home: Path,
    workdir: Path,
    bundle_cache: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Cluster]:
    repo = tmp_path_factory.mktemp("repo")
    async with cluster_on(network, temporal_address, ferry_home, workdir, bundle_cache, repo) as made:
        await made.apply()
        yield made


def _expected(network: HostNetwork) -> dict[str, str]:
    """Each host's hostname, to the `major.minor` of its release's python3."""
    found = {}
    for host, suite in zip(network.hosts, SUITES, strict=True):
        assert host.root is not None
        major, minor = root_python(host.root)
        assert (major, minor) == PYTHONS[suite]
        found[host.hostname] = f"{major}.{minor}"
    return found


async def test_each_host_runs_the_agent_of_its_own_python(fleet: Cluster) -> None:
    """The bundle on each host is its Python's, and that Python compiled the agent (its .pyc are tagged
    with the interpreter that wrote them)."""
    for host, suite in zip(fleet.network.hosts, SUITES, strict=True):
        major, minor = PYTHONS[suite]
        remote = Path(fleet.options.remote_dir.format(name="", hostname=host.address))
        [bundle] = [path for path in (remote / "bundles").iterdir() if path.is_dir()]
        manifest = json.loads((bundle / "ferry_bundle.json").read_text())
        assert manifest["python"] == [major, minor], suite
        compiled = {path.name for path in (bundle / "agent" / "__pycache__").glob("main.*.pyc")}
        assert compiled == {f"main.cpython-{major}{minor}.pyc"}, suite


async def test_a_task_spans_the_three_releases_with_its_ranks_and_the_masters_address(fleet: Cluster) -> None:
    show = f"echo rank=$FERRY_NODE_RANK master=$FERRY_MASTER_NODE_IP host=$(hostname) python=$({SAY_PYTHON})"
    final = await fleet.finished(await fleet.submit(task([show], nodes=3), "across"))
    assert final.status == RunStatus.DONE
    jobs = fleet.jobs(final)
    said = [
        dict(w.split("=") for w in fleet.api.logs(final, job=j.job_num)[0].decode().split()) for j in jobs
    ]
    master = fleet.address_of(jobs[0].instance_name)
    assert sorted(s["rank"] for s in said) == ["0", "1", "2"]
    assert {s["master"] for s in said} == {master}
    assert {s["host"]: s["python"] for s in said} == _expected(fleet.network)
    await fleet.check_idle()


async def test_a_lost_host_on_python_3_9_comes_back_and_takes_jobs(fleet: Cluster) -> None:
    lost = await fleet.lose_and_recover(1)  # bullseye's
    final = await fleet.finished(await fleet.submit(task([SAY_PYTHON], nodes=3), "again"))
    assert final.status == RunStatus.DONE
    [back] = [j for j in fleet.jobs(final) if j.instance_name == lost]
    assert fleet.api.logs(final, job=back.job_num)[0].decode().split() == ["3.9"]
    await fleet.check_idle()


async def test_ssh_into_a_job_through_a_python_3_9_hosts_sshd_and_agent(
    fleet: Cluster, tmp_path: Path
) -> None:
    """What `ferry attach` sets up (tests/fleet/test_attach_fleet.py has all of it): the user's ssh jumps
    through the host's own sshd (Debian 11's) to the agent's SSH server (the asyncssh release 3.9 gets)."""
    home = tmp_path / "user"
    base = fleet.api
    keys = [public_key_line(home)]
    api = FerryAPI(
        base.client, base.store, project=base.project, task_queue=base.task_queue, authorized_keys=keys
    )
    conf = parse_configuration(
        {"type": "dev-environment", "ide": "vscode", "inactivity_duration": "1h", "resources": SMALL}
    )
    assert isinstance(conf, DevEnvironmentConfiguration)
    record = await api.submit(conf, repo_dir=fleet.repo, run_name="old-dev")
    try:
        attached = await attach(DirectRoutes.over(api), home, record, Console(file=io.StringIO()))
        [job] = fleet.jobs(record)
        # The scheduler takes the first of equally free instances, by name: host 1's.
        host = fleet.network.host(fleet.host_index(job.instance_name))
        assert host.index == 1, job.instance_name
        ran = await user_ssh("ssh", attached.config, "old-dev", f"hostname; {SAY_PYTHON}")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.split() == [host.hostname, "3.9"]
    finally:
        await api.stop("old-dev", abort=True)
        await fleet.finished(record)
    await fleet.check_idle()


async def test_a_service_replica_on_python_3_9_is_probed_ready_and_serves(fleet: Cluster) -> None:
    """A service's replica on the bullseye host: its own python3 serves, the worker's probe finds it ready
    and the URL the proxies forward to answers."""
    serve = f"cd $(mktemp -d) && {SAY_PYTHON} > index.html && exec python3 -m http.server 8000"
    conf = parse_configuration(
        {"type": "service", "port": 8000, "auth": False, "commands": [serve], "resources": SMALL}
    )
    assert isinstance(conf, ServiceConfiguration)
    record = await fleet.api.submit(conf, repo_dir=fleet.repo, run_name="web")
    try:

        async def ready() -> ServiceReplicaRecord | None:
            replicas = fleet.api.store.list_service_replicas([record.id])
            return next((r for r in replicas if r.state == "ready"), None)

        replica = await until("the replica to be probed ready", ready)
        [job] = fleet.jobs(record)
        assert fleet.host_index(job.instance_name) == 1, job.instance_name  # the first free, by name
        async with httpx.AsyncClient() as http:
            answer = await http.get(replica.url, timeout=10)
        assert (answer.status_code, answer.text.split()) == (200, ["3.9"])
    finally:
        await fleet.api.stop("web", abort=True)
        await fleet.finished(record)
    await fleet.check_idle()
