"""SSH fleets' hosts: `HostPool`, the hosts this worker reaches by instance name, with their agents deployed.

`HostPool.deploy(target)` makes the target's agent run and answer (each host, its SSH connection, its agent
and the tunnel to it, is an `SSHAgentHost`: activities.ssh_host), with the agent bundle for the host's
Python, which the pool builds once for each (activities.agent_bundle). A new token (the agent restarted)
makes a new client, handed to `on_client` (e.g. InstanceDirectory.add).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from activities.agent_bundle import AgentBundle, build_bundle
from activities.agent_client import AgentClient
from activities.agent_targets import HostPython
from activities.ssh_config import DeployedAgent, DeployOptions, SSHLogin, SSHTarget, ssh_targets
from activities.ssh_host import SSHAgentHost, SSHDeployError
from core.settings import Settings
from core.wire.agent_api import InstanceInfo
from core.wire.volumes import HostDirs

_PROBE_TIMEOUT = 5.0  # seconds a probe of the host's supervisor may take: two interpreter starts over SSH
_PROBE_EVERY = 2.0  # while an agent is being started again, its supervisor is asked again this often
_RESTART_POLL = 0.2

__all__ = [
    "DeployOptions",
    "DeployedAgent",
    "HostPool",
    "SSHLogin",
    "SSHTarget",
    "ssh_targets",
]


class HostPool:
    """The SSH hosts this worker reaches, by instance name: deploy, reach, check, forget."""

    def __init__(
        self,
        options: DeployOptions | None = None,
        on_client: Callable[[str, AgentClient], None] | None = None,
    ) -> None:
        self.options = options or DeployOptions()
        self.on_client = on_client
        self._hosts: dict[str, SSHAgentHost] = {}
        self._bundles: dict[HostPython, AgentBundle] = {}

    async def bundle(self, python: HostPython) -> AgentBundle:
        """The agent bundle for a host's interpreter, built once (its packages fetched for another Python
        than the worker's: BundleError when they cannot be had)."""
        if python not in self._bundles:
            settings = Settings.from_env()
            self._bundles[python] = await asyncio.to_thread(
                build_bundle,
                self.options.bundle_cache or settings.home / "agent-bundles",
                python,
                self.options.wheel_cache or settings.home / "agent-wheels",
                self.options.wheelhouse or settings.agent_wheels,
            )
        return self._bundles[python]

    def _host(self, target: SSHTarget) -> SSHAgentHost:
        return SSHAgentHost(target, self.options, self.bundle)

    async def deploy(self, target: SSHTarget, *, restart: bool = False) -> DeployedAgent:
        """The target's agent running and reachable; the same call again keeps it (or restarts a dead one)."""
        host = self._hosts.get(target.name)
        if host is None or host.target != target:
            if host is not None:
                await host.aclose()
            host = self._hosts[target.name] = self._host(target)
        deployed, changed = await host.deploy(restart)
        if changed and self.on_client is not None:
            self.on_client(target.name, host.client)
        return deployed

    def host(self, name: str) -> SSHAgentHost:
        try:
            return self._hosts[name]
        except KeyError:
            raise SSHDeployError(f"instance {name!r} is not an SSH host of this worker") from None

    def client(self, name: str) -> AgentClient:
        return self.host(name).client

    def names(self) -> list[str]:
        return sorted(self._hosts)

    def dirs(self, name: str) -> HostDirs | None:
        """The host's agent data directory and its user's home (docs/volumes.md); None until deployed."""
        host = self._hosts.get(name)
        return None if host is None else host.dirs

    async def host_info(self, name: str) -> InstanceInfo:
        return await self.client(name).instance_info()

    async def healthy(self, name: str, timeout: float = 3.0) -> bool:
        """Whether the host's agent answers its healthcheck within `timeout` seconds. An agent that died
        and that its supervisor is starting again (agent/supervisor.py) is waited for, up to the options'
        `startup_timeout`: the host is not lost, and neither are its jobs. A healthcheck that gets no answer
        at all (a dead link, a hung agent) is not: the host is unhealthy, as soon as before."""
        failure = await self._failure(name, timeout)
        if failure is None:
            return True
        host = self._hosts.get(name)
        if isinstance(failure, TimeoutError) or host is None or not host.connected or host.bundle is None:
            return False
        deadline = time.monotonic() + self.options.startup_timeout
        probe_at = time.monotonic()
        while time.monotonic() < deadline:
            if time.monotonic() >= probe_at:
                if not await host.restarting(max(timeout, _PROBE_TIMEOUT)):
                    return await self._failure(name, timeout) is None  # ready again, or no restart at all
                probe_at = time.monotonic() + _PROBE_EVERY
            if await self._failure(name, timeout) is None:
                return True
            await asyncio.sleep(_RESTART_POLL)
        return False

    async def _failure(self, name: str, timeout: float) -> Exception | None:
        """Why the host's agent did not answer its healthcheck within `timeout` seconds; None if it did."""
        try:
            await asyncio.wait_for(self.client(name).healthcheck(), timeout)
        except Exception as exc:
            return exc
        return None

    async def stop(self, target: SSHTarget) -> None:
        """Stop the target's agent, if one runs there (no deployment first), and forget the host."""
        host = self._hosts.pop(target.name, None) or self._host(target)
        try:
            await host.stop_agent()
        finally:
            await host.aclose()

    async def remove(self, name: str, *, stop_agent: bool = False) -> None:
        host = self._hosts.pop(name, None)
        if host is None:
            return
        try:
            if stop_agent:
                await host.stop_agent()
        finally:
            await host.aclose()

    async def aclose(self) -> None:
        for name in list(self._hosts):
            await self.remove(name)
