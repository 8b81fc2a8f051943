"""dstack's `repos` on an SSH fleet (docs/runs.md#repos): a job on a real `sshd` host in a network
namespace, whose agent was deployed over SSH, clones with that host's `git` from remotes this machine
serves on the namespaces' side of its veth (10.203.X.1): a public one at a branch, and a private one with
the token stored for its URL, which the job's log and events do not hold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.secret_api import set_repo_credential
from core.status import RunStatus
from testbed.fleets import Cluster, task
from testbed.git_servers import git_daemon, make_remote, private_http
from testbed.helpers import leftover_processes
from testbed.netns import HostNetwork

TOKEN = "glpat-fleetRepoToken93ab0"


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostNetwork]:
    """One host is enough here (tests/fleet/conftest.py makes three)."""
    net = HostNetwork(1, tmp_path_factory.mktemp("netns")).up()
    yield net
    net.down()
    assert net.namespaces() == []
    assert leftover_processes(net.workdir) == []


@pytest.fixture(scope="module")
def remotes(network: HostNetwork, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    root = tmp_path_factory.mktemp("remotes")
    make_remote(root, "repo")
    make_remote(root / "p", "private", "private text\n")
    address = f"10.203.{network.subnet}.1"  # this machine, as the hosts reach it
    with (
        git_daemon(root / "served", address) as daemon,
        private_http(root / "p" / "served", TOKEN, address) as http,
    ):
        yield f"{daemon}/repo.git", f"{http}/private.git"


async def test_a_job_on_an_ssh_host_clones_public_and_private_repos(
    cluster: Cluster, remotes: tuple[str, str], tmp_path: Path
) -> None:
    public, private = remotes
    set_repo_credential(cluster.api.store, cluster.api.project, private, TOKEN, ssh_key=False)
    await cluster.apply()
    conf = task(
        ["cat dev.txt private/secret.txt", "hostname"],
        repos=[{"url": public, "branch": "dev"}, {"url": private, "path": "private"}],
    )
    final = await cluster.finished(await cluster.submit(conf, "fleetclones"))
    log = cluster.api.logs(final)[0].decode()
    assert final.status == RunStatus.DONE, (final.status_message, log)
    assert log.splitlines() == ["on dev", "private text", cluster.network.hosts[0].hostname]
    said = cluster.api.all_events(final)  # the run's and its jobs' eventlogs
    assert all(TOKEN not in text for text in [log, str(said), str(cluster.jobs(final)), str(final)])
    await cluster.check_idle()
