"""Fixtures: one real agent shared by the tests that need nothing special, and a client per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from agent_harness import AgentProcess, start_agent, stop_agent
from ssh_harness import Jobs, UserKey, jobs_on, make_key, require_openssh

from activities.agent_client import AgentClient
from testbed.containers import PodmanService, podman_service


@pytest.fixture(scope="session")
def shared_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    agent = start_agent(tmp_path_factory.mktemp("shared-agent"))
    yield agent
    stop_agent(agent)


@pytest.fixture
async def client(shared_agent: AgentProcess) -> AsyncIterator[AgentClient]:
    async with shared_agent.client() as agent_client:
        yield agent_client


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path


# The agent's SSH server (tests/agent/test_ssh_*.py): a user's key, and jobs it opens.
@pytest.fixture
def key(tmp_path: Path) -> UserKey:
    require_openssh()
    return make_key(tmp_path / "keys")


@pytest.fixture
async def jobs(client: AgentClient, shared_agent: AgentProcess, key: UserKey) -> AsyncIterator[Jobs]:
    async with jobs_on(client, shared_agent, key) as started:
        yield started


# Container jobs (tests/agent/test_container_*.py): one podman service and test images for the session,
# and an agent that uses it.
@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanService]:
    with podman_service(tmp_path_factory.mktemp("podman")) as service:
        yield service


@pytest.fixture(scope="session")
def container_agent(
    tmp_path_factory: pytest.TempPathFactory, podman: PodmanService
) -> Iterator[AgentProcess]:
    agent = start_agent(
        tmp_path_factory.mktemp("container-agent"), extra_args=("--container-engine", podman.url)
    )
    yield agent
    stop_agent(agent)
