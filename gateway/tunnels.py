"""The proxy's tunnels to replicas behind a backend's login node (docs/services.md, replicas behind a
login node).

A replica on a Slurm node (docs/backends.md) is registered at the node's address with `via`, its backend's
id: compute nodes sit on a private network that only the login node reaches. For each such row this proxy
keeps one SSH connection per backend (its key opened with this process's keys, which every proxy shares with
the workers: store/keys.py) and a local tunnel per replica over it (activities.ssh_tunnel.LocalTunnel), and
the routing table gets the tunnel's `http://127.0.0.1:<port>` in place of the node's address: the
forwarders never know. What to open and close is decided by the pure functions below (`plan_tunnels`,
`routed_rows`); `ReplicaTunnels` carries it out at each refresh of the directory (gateway.directory).

- A replica whose tunnel is not open (its login node not connected yet) is left out of the table, never
  routed to an address this proxy cannot reach; a draining one stays, so that this proxy, with nothing in
  flight to it, marks it drained.
- A tunnel whose row is gone (or whose url changed) is closed; a connection no row needs any more too.
- A login node that cannot be reached is logged once per outage, tried again with backoff up to
  RETRY_MAX seconds, in the background: the refresh of every other service goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from core.services.replicas import ReplicaState
from store.models import ServiceReplicaRecord
from store.repository import Store

if TYPE_CHECKING:  # loaded once a replica is behind a login node (gateway.login_nodes): a proxy that
    import asyncssh  # routes none starts without asyncssh

    from activities.ssh_tunnel import LocalTunnel
    from gateway.login_nodes import Connections

log = logging.getLogger(__name__)

RETRY_FIRST = 1.0  # seconds before a login node that could not be reached is tried again; doubling ...
RETRY_MAX = 60.0  # ... up to this

# --- the decisions (pure) ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaTunnel:
    """A tunnel one replica's row asks for: to host:port, beyond the login node of backend `via`."""

    replica_id: str
    via: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class TunnelPlan:
    open: frozenset[ReplicaTunnel]  # tunnels to open now (their login node is connected)
    close: frozenset[ReplicaTunnel]  # tunnels no row asks for, or whose login node is no longer connected
    connect: frozenset[str]  # login nodes (backend ids) rows need and that are not connected
    disconnect: frozenset[str]  # login nodes no row needs any more


def tunnel_of(row: ServiceReplicaRecord) -> ReplicaTunnel | None:
    """The tunnel a row asks for; None for a replica reached directly (or a url that names no port)."""
    if row.via is None:
        return None
    try:
        target = urlsplit(row.url)
        port = target.port
    except ValueError:
        return None
    if target.hostname is None or port is None:
        return None
    return ReplicaTunnel(row.id, row.via, target.hostname, port)


def plan_tunnels(
    wanted: Collection[ReplicaTunnel],
    opened: Collection[ReplicaTunnel],
    connected: Collection[str],
    known: Collection[str],
) -> TunnelPlan:
    """What to do, given the tunnels the rows ask for, those open, the login nodes connected and those
    this proxy has a connection (or an attempt) for."""
    needed = {tunnel.via for tunnel in wanted}
    return TunnelPlan(
        open=frozenset(t for t in wanted if t not in opened and t.via in connected),
        close=frozenset(t for t in opened if t not in wanted or t.via not in connected),
        connect=frozenset(needed - set(connected)),
        disconnect=frozenset(set(known) - needed),
    )


def routed_rows(
    rows: Iterable[ServiceReplicaRecord], local_urls: Mapping[ReplicaTunnel, str]
) -> list[ServiceReplicaRecord]:
    """The rows the routing table is built from: a replica behind a login node at its tunnel's local url,
    left out while it has none (unless draining: it stays, never routed, so that its drain is marked)."""
    routed = []
    for row in rows:
        tunnel = tunnel_of(row)
        if row.via is None:
            routed.append(row)
        elif tunnel is not None and tunnel in local_urls:
            routed.append(ServiceReplicaRecord(**(row.model_dump() | {"url": local_urls[tunnel]})))
        elif row.state == ReplicaState.DRAINING:
            routed.append(row)
    return routed


def retry_delay(failures: int) -> float:
    """Seconds before the next attempt after `failures` failed ones in a row."""
    return min(RETRY_FIRST * 2 ** max(failures - 1, 0), RETRY_MAX)


# --- the effects ------------------------------------------------------------------------------------------

Opener = Callable[[str], Awaitable["Connections"]]
CONNECT_TIMEOUT = 10.0  # seconds, for a tunnel's channel to its replica (as the workers' SSH connections)


class LoginLink:
    """One backend's login node as this proxy reaches it: one SSH connection, made in the background."""

    def __init__(self, via: str, opener: Opener) -> None:
        self.via = via
        self._opener = opener
        self._connections: Connections = ()
        self._connecting: asyncio.Task[None] | None = None
        self._failures = 0
        self._retry_at = 0.0

    @property
    def connection(self) -> asyncssh.SSHClientConnection | None:
        conn = self._connections[0] if self._connections else None
        return conn if conn is not None and not conn.is_closed() else None

    def keep_up(self) -> None:
        """A connection is being made, unless there is one, an attempt is under way, or one is due later."""
        if self.connection is not None or self._connecting is not None or time.monotonic() < self._retry_at:
            return
        self._connecting = asyncio.get_running_loop().create_task(self._connect())

    async def current(self) -> asyncssh.SSHClientConnection:
        """The connection, for a tunnel's new channel; OSError while there is none (the refresh that
        notices it takes the backend's replicas out of the table)."""
        conn = self.connection
        if conn is None:
            raise OSError(f"the login node of backend {self.via} is not connected")
        return conn

    async def _connect(self) -> None:
        try:
            connections = await self._opener(self.via)
        except Exception as err:  # the store, the key, the network: each is retried alike
            self._failures += 1
            delay = retry_delay(self._failures)
            self._retry_at = time.monotonic() + delay
            if self._failures == 1:  # once per outage, not once per attempt
                log.warning(
                    "proxy: cannot reach the login node of backend %s (%s); its replicas are left out "
                    "until it answers (retrying, every %g s at most)",
                    self.via,
                    " ".join(str(err).split()) or type(err).__name__,
                    RETRY_MAX,
                )
        else:
            if self._failures:
                log.warning("proxy: the login node of backend %s answers again", self.via)
            self._failures = 0
            self._abort()
            self._connections = connections
        finally:
            self._connecting = None

    def _abort(self) -> None:
        for conn in self._connections:
            conn.abort()
        self._connections = ()

    def close(self) -> None:
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
        self._abort()


class ReplicaTunnels:
    """This proxy's login connections and replica tunnels, kept in step with the store's rows."""

    def __init__(self, opener: Opener, connect_timeout: float) -> None:
        self._opener = opener
        self._connect_timeout = connect_timeout
        self._links: dict[str, LoginLink] = {}
        self._tunnels: dict[ReplicaTunnel, LocalTunnel] = {}

    @classmethod
    def for_store(cls, store: Store) -> ReplicaTunnels:
        """Over the backends recorded in `store`; host keys checked as the workers check them
        (FERRY_SSH_KNOWN_HOSTS, docs/backends.md#what-a-cluster-needs)."""

        async def opener(via: str) -> Connections:
            from gateway.login_nodes import open_login

            return await open_login(store, via)

        return cls(opener, CONNECT_TIMEOUT)

    async def follow(self, rows: list[ServiceReplicaRecord]) -> list[ServiceReplicaRecord]:
        """The rows to route by, with the tunnels and connections they need opened (or being made) and
        those they no longer need closed. Never waits on a login node."""
        wanted = {tunnel for row in rows if (tunnel := tunnel_of(row)) is not None}
        if not wanted and not self._tunnels and not self._links and all(row.via is None for row in rows):
            return rows
        connected = {via for via, link in self._links.items() if link.connection is not None}
        plan = plan_tunnels(wanted, self._tunnels.keys(), connected, self._links.keys())
        for tunnel in plan.close:
            self._tunnels.pop(tunnel).close()
        for via in plan.disconnect:
            self._links.pop(via).close()
        for via in plan.connect:
            self._links.setdefault(via, LoginLink(via, self._opener)).keep_up()
        for wanted_tunnel in plan.open:
            await self._open(wanted_tunnel)
        local = {tunnel: f"http://127.0.0.1:{opened.port}" for tunnel, opened in self._tunnels.items()}
        return routed_rows(rows, local)

    async def _open(self, tunnel: ReplicaTunnel) -> None:
        from activities.ssh_tunnel import LocalTunnel

        opened = LocalTunnel(
            self._links[tunnel.via].current, lambda: (tunnel.host, tunnel.port), self._connect_timeout
        )
        try:
            await opened.start()
        except OSError as err:  # no local port to be had: tried again at the next refresh
            log.warning("proxy: no local port for replica %s's tunnel: %s", tunnel.replica_id, err)
            return
        self._tunnels[tunnel] = opened

    def opened(self) -> dict[ReplicaTunnel, int]:
        """Each open tunnel's local port (what tests look at)."""
        return {tunnel: opened.port for tunnel, opened in self._tunnels.items()}

    async def aclose(self) -> None:
        for opened in self._tunnels.values():
            opened.close()
        self._tunnels.clear()
        for link in self._links.values():
            link.close()
        self._links.clear()
