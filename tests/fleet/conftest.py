"""Three SSH hosts in network namespaces for the module that asks for them, and a pool deployed on them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from activities.agent_bundle import AgentBundle, build_bundle
from activities.ssh import HostPool
from testbed.fleets import Cluster, cluster_on
from testbed.helpers import deploy_options, leftover_processes, target
from testbed.netns import HostNetwork


@pytest.fixture(scope="session")
def bundle_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One bundle for the whole run: building it lists the agent's imports in a subprocess."""
    return tmp_path_factory.mktemp("bundles")


@pytest.fixture(scope="session")
def bundle(bundle_cache: Path) -> AgentBundle:
    return build_bundle(bundle_cache)


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostNetwork]:
    net = HostNetwork(3, tmp_path_factory.mktemp("netns")).up()
    yield net
    net.down()
    assert net.namespaces() == []
    assert leftover_processes(net.workdir) == []


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fleet")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(network: HostNetwork, workdir: Path, bundle_cache: Path) -> AsyncIterator[HostPool]:
    hosts = HostPool(deploy_options(workdir, bundle_cache))
    await asyncio.gather(*(hosts.deploy(target(network, k)) for k in (1, 2, 3)))
    yield hosts
    await hosts.aclose()


@pytest.fixture
async def cluster(
    network: HostNetwork,
    temporal_address: str,  # noqa: F811 (the fixtures imported below, by name)
    ferry_home: Path,  # noqa: F811
    workdir: Path,
    bundle_cache: Path,
    tmp_path: Path,
) -> AsyncIterator[Cluster]:
    """An SSH fleet of the module's hosts, with a worker of its own (testbed/fleets.py); deleted after."""
    repo = tmp_path / "repo"
    repo.mkdir()
    async with cluster_on(network, temporal_address, ferry_home, workdir, bundle_cache, repo) as made:
        yield made


# A real dev server and store for the runs on these hosts: the lifecycle tests' session fixtures.
from tests.lifecycle.conftest import ferry_home, temporal_address  # noqa: E402, F401
