"""A client that follows its agent (`relocate`, as the worker's client of the local agent does): after a
connection failure it looks where the agent is now, one look for many failures, and sends again only what
is safe to (docs/jobs.md#a-restarted-agent)."""

from __future__ import annotations

import asyncio

import pytest
from agent_harness import AgentProcess, free_port

from activities.agent_client import AgentAddress, AgentClient, AgentError, AgentUnreachable


class Finder:
    """A `relocate` that answers `address` and counts how often it was asked."""

    def __init__(self, address: AgentAddress | None) -> None:
        self.address = address
        self.asked = 0

    async def __call__(self) -> AgentAddress:
        self.asked += 1
        await asyncio.sleep(0.1)  # a look takes a moment: the failures meanwhile wait for it
        if self.address is None:
            raise RuntimeError("the agent did not start")
        return self.address


def nowhere() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there: connections are refused


async def test_requests_that_could_not_connect_go_to_the_agent_found(shared_agent: AgentProcess) -> None:
    finder = Finder(AgentAddress(shared_agent.url, shared_agent.token, incarnation=1))
    async with AgentClient(nowhere(), shared_agent.token, timeout=5, relocate=finder) as client:
        infos = await asyncio.gather(*(client.instance_info() for _ in range(50)))
        assert all(info.cpus > 0 for info in infos)
        assert client.base_url == shared_agent.url
        assert 1 <= finder.asked < 51  # a look answers every failure before it began
        before = finder.asked
        await client.healthcheck()
        assert finder.asked == before  # no failure, no look


async def test_a_post_that_could_not_connect_is_sent_again(shared_agent: AgentProcess) -> None:
    finder = Finder(AgentAddress(shared_agent.url, shared_agent.token))
    async with AgentClient(nowhere(), shared_agent.token, timeout=5, relocate=finder) as client:
        # It never reached an agent: sent again, it reaches the one found, which answers it.
        with pytest.raises(AgentError) as refused:
            await client.remove("no-such-task")
        assert refused.value.status_code == 404


async def test_an_agent_not_found_again_is_unreachable() -> None:
    same = nowhere()
    for finder in (Finder(AgentAddress(same, "token")), Finder(None)):
        async with AgentClient(same, "token", timeout=5, relocate=finder) as client:
            with pytest.raises(AgentUnreachable, match="unreachable"):
                await client.healthcheck()
            assert finder.asked == 1


async def test_without_relocate_nothing_is_looked_up() -> None:
    async with AgentClient(nowhere(), "token", timeout=5) as client:
        with pytest.raises(AgentUnreachable):
            await client.healthcheck()
