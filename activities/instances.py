"""The instances this worker can reach, by name: each one's agent client.

Placement decisions travel through Temporal as instance names; the address and token of an agent stay in
the worker (tokens never go into workflow histories). SSH hosts join as their fleet deploys them (the
HostPool hands each new client to `add`); a host this worker has not deployed itself (it started after
the fleet did, or another worker deployed it) is found on first use by `resolve`, through the resolver
the worker installs (activities.fleet: the store's instance record, then its fleet's configuration).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from activities.agent_client import AgentClient
from core.wire.volumes import HostDirs
from core.wire.workflow_ids import LOCAL_INSTANCE as LOCAL_INSTANCE  # re-exported: the worker names it here

if TYPE_CHECKING:
    from activities.ssh import HostPool


class UnknownInstance(LookupError):
    pass


class InstanceDirectory:
    def __init__(self, pool: HostPool | None = None) -> None:
        self._clients: dict[str, AgentClient] = {}
        self._dirs: dict[str, HostDirs] = {}
        self.pool = pool
        self._resolver: Callable[[str], Awaitable[None]] | None = None
        self._resolving: dict[str, asyncio.Lock] = {}
        self._closers: list[Callable[[], Awaitable[None]]] = []

    def closing(self, close: Callable[[], Awaitable[None]]) -> None:
        """`close()` is awaited when the directory is (the backends' login connections, say)."""
        self._closers.append(close)

    def add(self, name: str, client: AgentClient) -> None:
        self._clients[name] = client

    def set_dirs(self, name: str, dirs: HostDirs) -> None:
        """Where an instance that is not an SSH host of the pool (the local one) keeps its directories."""
        self._dirs[name] = dirs

    async def dirs(self, name: str) -> HostDirs:
        """The instance's home and agent data directory, as its agent's user sees them (docs/volumes.md):
        the local instance's as set, an SSH host's as its deployment found them."""
        await self.resolve(name)
        if name in self._dirs:
            return self._dirs[name]
        dirs = self.pool.dirs(name) if self.pool is not None else None
        if dirs is None:
            raise UnknownInstance(f"the directories of instance {name!r} are not known to this worker")
        return dirs

    def forget(self, name: str) -> None:
        self._clients.pop(name, None)

    def set_resolver(self, resolver: Callable[[str], Awaitable[None]]) -> None:
        """`resolver(name)` makes an unknown instance known (it calls `add`), or raises."""
        self._resolver = resolver

    def client(self, name: str) -> AgentClient:
        try:
            return self._clients[name]
        except KeyError:
            raise UnknownInstance(f"instance {name!r} is not known to this worker") from None

    async def resolve(self, name: str) -> AgentClient:
        """The instance's client; an instance this worker has not met yet is looked up first."""
        if name in self._clients or self._resolver is None:
            return self.client(name)
        lock = self._resolving.setdefault(name, asyncio.Lock())
        async with lock:  # one lookup (and SSH deployment) per instance, however many activities ask
            if name not in self._clients:
                await self._resolver(name)
        return self.client(name)

    def names(self) -> list[str]:
        return sorted(self._clients)

    async def aclose(self) -> None:
        for close in self._closers:
            await close()
        if self.pool is not None:
            await self.pool.aclose()
        for client in self._clients.values():
            await client.aclose()
