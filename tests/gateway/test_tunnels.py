"""Replicas behind a login node (gateway/tunnels.py, docs/services.md#replicas-behind-a-login-node): the pure
decisions, then the proxy routing through its tunnels over a stand-in for the login node's SSH connection
(its channels are local connections to a real replica), so no SSH is needed here; tests/slurm has the real
thing."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest

from gateway import tunnels
from gateway.app import Gateway, make_runner
from gateway.tunnels import (
    RETRY_MAX,
    ReplicaTunnel,
    ReplicaTunnels,
    plan_tunnels,
    retry_delay,
    routed_rows,
    tunnel_of,
)
from store.models import ServiceReplicaRecord
from tests.gateway.conftest import FAST, Harness, add_replica, add_service, eventually

VIA = "main/hpc"
NODE_URL = "http://10.99.0.11:8000"  # a compute node's address: nothing here routes to it


def row(
    replica_id: str, url: str = NODE_URL, via: str | None = VIA, state: str = "ready"
) -> ServiceReplicaRecord:
    return ServiceReplicaRecord(
        id=replica_id, run_id="run", replica_num=0, submission_num=0, url=url, via=via, state=state
    )


def to(replica_id: str, via: str = VIA, host: str = "10.99.0.11", port: int = 8000) -> ReplicaTunnel:
    return ReplicaTunnel(replica_id, via, host, port)


# --- the decisions -------------------------------------------------------------------------------------


def test_a_row_asks_for_a_tunnel_only_through_a_login_node() -> None:
    assert tunnel_of(row("r1")) == to("r1")
    assert tunnel_of(row("r1", via=None)) is None
    assert tunnel_of(row("r1", url="http://10.99.0.11")) is None  # no port: nothing to reach
    assert tunnel_of(row("r1", url="http://[fd00::11]:9000")) == to("r1", host="fd00::11", port=9000)


def test_tunnels_open_once_their_login_node_is_connected() -> None:
    plan = plan_tunnels({to("r1")}, opened=set(), connected=set(), known=set())
    assert (plan.open, plan.close, plan.connect, plan.disconnect) == (set(), set(), {VIA}, set())
    plan = plan_tunnels({to("r1")}, opened=set(), connected={VIA}, known={VIA})
    assert (plan.open, plan.close, plan.connect, plan.disconnect) == ({to("r1")}, set(), set(), set())
    plan = plan_tunnels({to("r1")}, opened={to("r1")}, connected={VIA}, known={VIA})
    assert (plan.open, plan.close, plan.connect, plan.disconnect) == (set(), set(), set(), set())


def test_a_tunnel_whose_row_is_gone_or_moved_is_closed_and_an_unneeded_login_node_disconnected() -> None:
    moved = to("r2", port=9000)
    plan = plan_tunnels({moved}, opened={to("r1"), to("r2")}, connected={VIA, "x/y"}, known={VIA, "x/y"})
    assert plan.close == {to("r1"), to("r2")}
    assert plan.open == {moved}
    assert plan.disconnect == {"x/y"}
    assert plan.connect == set()


def test_a_lost_login_node_closes_its_tunnels_and_is_connected_again() -> None:
    other = to("r2", via="main/other")
    plan = plan_tunnels(
        {to("r1"), other}, opened={to("r1"), other}, connected={"main/other"}, known={VIA, "main/other"}
    )
    assert (plan.open, plan.close, plan.connect, plan.disconnect) == (set(), {to("r1")}, {VIA}, set())


def test_the_table_routes_a_replica_behind_a_login_node_at_its_tunnel_and_leaves_it_out_without_one() -> None:
    direct = row("d", url="http://127.0.0.1:7000", via=None)
    open_one, closed_one, draining = (
        row("r1"),
        row("r2", url="http://10.99.0.12:8000"),
        row("r3", state="draining"),
    )
    routed = routed_rows([direct, open_one, closed_one, draining], {to("r1"): "http://127.0.0.1:41000"})
    assert [(r.id, r.url, r.via, r.state) for r in routed] == [
        ("d", "http://127.0.0.1:7000", None, "ready"),
        ("r1", "http://127.0.0.1:41000", VIA, "ready"),
        ("r3", NODE_URL, VIA, "draining"),  # never routed; kept so that its drain is marked
    ]
    assert open_one.url == NODE_URL  # the store's rows are left as they are


def test_a_login_node_is_tried_again_backing_off_to_a_minute() -> None:
    assert [retry_delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, RETRY_MAX, RETRY_MAX]


# --- the proxy, over a stand-in login connection ----------------------------------------------------------


class StandInLogin:
    """What ReplicaTunnels uses of an asyncssh connection: each channel to a node's address is a local
    connection to the port given for it."""

    def __init__(self, ports: dict[tuple[str, int], int]) -> None:
        self.ports = ports
        self.channels: list[tuple[str, int]] = []
        self.closed = False

    def is_closed(self) -> bool:
        return self.closed

    def abort(self) -> None:
        self.closed = True

    async def open_connection(self, host: str, port: int) -> Any:
        self.channels.append((host, port))
        return await asyncio.open_connection("127.0.0.1", self.ports[(host, port)])


class Logins:
    """The opener: a new StandInLogin per connection; `refuse` makes it fail as an unreachable node."""

    def __init__(self, ports: dict[tuple[str, int], int]) -> None:
        self.ports = ports
        self.made: list[StandInLogin] = []
        self.attempts = 0
        self.refuse: str | None = None

    async def __call__(self, via: str) -> Any:
        self.attempts += 1
        if self.refuse is not None:
            raise OSError(self.refuse)
        login = StandInLogin(self.ports)
        self.made.append(login)
        return (login,)


async def proxy(harness: Harness, logins: Logins) -> tuple[Gateway, str]:
    gateway = Gateway(harness.store, public_url="http://proxy.test:8300", options=FAST)
    gateway.directory.tunnels = ReplicaTunnels(logins, connect_timeout=2.0)
    runner = make_runner(gateway)
    await runner.setup()
    await gateway.site(runner, "127.0.0.1", 0).start()
    harness.runners.append(runner)
    host, port = runner.addresses[0][:2]
    return gateway, f"http://{host}:{port}"


def add_replica_via(harness: Harness, run_id: str, replica_id: str, url: str = NODE_URL) -> None:
    add_replica(harness.store, run_id, replica_id, url)
    record = harness.store.get_replica(replica_id)
    assert record is not None
    record.via = VIA
    harness.store.register_replica(record)


async def test_a_replica_behind_a_login_node_is_served_through_its_tunnel(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    replica = await harness.replica("on-node")
    logins = Logins({("10.99.0.11", 8000): int(replica.url.rsplit(":", 1)[1])})
    run_id = add_service(harness.store, "web", auth=False)
    add_replica_via(harness, run_id, "web-0")
    gateway, url = await proxy(harness, logins)

    async with http.get(f"{url}/proxy/services/main/web/hello") as answer:
        assert answer.status == 200
        assert (await answer.json())["path"] == "/hello"
    assert logins.made[0].channels[0] == ("10.99.0.11", 8000)  # the login node was asked for the node
    [tunnel] = gateway.directory.tunnels.opened()
    [served] = gateway.directory.table.services[("main", "web")].ready
    assert served.url == f"http://127.0.0.1:{gateway.directory.tunnels.opened()[tunnel]}"

    harness.store.remove_replica("web-0")  # its job ended: its tunnel and the unneeded connection go
    await eventually(lambda: not gateway.directory.tunnels.opened() and logins.made[0].closed)


async def test_an_unreachable_login_node_is_logged_once_retried_and_blocks_no_other_service(
    harness: Harness,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tunnels, "RETRY_FIRST", 0.01)
    monkeypatch.setattr(tunnels, "RETRY_MAX", 0.05)
    behind, direct = await harness.replica("on-node"), await harness.replica("direct")
    logins = Logins({("10.99.0.11", 8000): int(behind.url.rsplit(":", 1)[1])})
    logins.refuse = "Connection refused"
    add_replica_via(harness, add_service(harness.store, "web", auth=False), "web-0")
    add_replica(harness.store, add_service(harness.store, "api", auth=False), "api-0", direct.url)
    gateway, url = await proxy(harness, logins)

    await eventually(lambda: logins.attempts >= 3)
    assert ("main", "web") in gateway.directory.table.services
    assert gateway.directory.table.services[("main", "web")].ready == ()  # never routed to the node itself
    async with http.get(f"{url}/proxy/services/main/api/") as answer:
        assert (answer.status, (await answer.json())["replica"]) == (200, "direct")
    said = [r.getMessage() for r in caplog.records if r.name == "gateway.tunnels"]
    assert len([m for m in said if "cannot reach the login node of backend main/hpc" in m]) == 1, said

    logins.refuse = None  # the login node answers again: the held replica is routed
    with caplog.at_level(logging.WARNING, logger="gateway.tunnels"):
        async with http.get(f"{url}/proxy/services/main/web/again") as answer:
            assert (answer.status, (await answer.json())["replica"]) == (200, "on-node")
    assert any("answers again" in r.getMessage() for r in caplog.records)
