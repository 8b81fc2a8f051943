"""What an SSH fleet deploys where: its hosts with every setting resolved, and the deployment's options.

Pure models (activities.ssh does the connecting); the fleet's `ssh_config` gives the defaults, each host
may override them, as in dstack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from core.configuration.fleet import FleetConfiguration, ProxyJump, SSHHost
from core.fleets.book import instance_name


class SSHLogin(BaseModel):
    hostname: str
    port: int = 22
    user: str
    identity_file: str | None = None


class SSHTarget(SSHLogin):
    """One host of an SSH fleet with every setting resolved; `name` is the instance name."""

    name: str
    proxy_jump: SSHLogin | None = None
    internal_ip: str | None = None
    blocks: int | Literal["auto"] = 1
    # `placement: cluster` (core.fleets.cluster): the other hosts it must reach directly, and the network
    # its address for them must be in (`ssh_config.network`); None: not a cluster fleet.
    cluster_peers: list[str] | None = None
    cluster_network: str | None = None


def ssh_targets(fleet: FleetConfiguration, fleet_name: str) -> list[SSHTarget]:
    """The hosts of an SSH fleet, `<fleet>-<n>` each, host settings over `ssh_config`'s."""
    config = fleet.ssh_config
    if config is None:
        return []

    def jump(proxy: ProxyJump | None, user: str, identity: str | None) -> SSHLogin | None:
        return (
            SSHLogin(
                hostname=proxy.hostname,
                port=proxy.port or 22,
                user=proxy.user or user,
                identity_file=proxy.identity_file or identity,
            )
            if proxy is not None
            else None
        )

    def reached_at(host: SSHHost) -> str:
        return host.internal_ip or host.hostname

    def target(index: int, host: SSHHost) -> SSHTarget:
        user = host.user or config.user or ""
        identity = host.identity_file or config.identity_file
        cluster = fleet.placement == "cluster"
        peers = [reached_at(other) for at, other in enumerate(config.hosts) if at != index]
        return SSHTarget(
            name=instance_name(fleet_name, index),
            hostname=host.hostname,
            port=host.port or config.port or 22,
            user=user,
            identity_file=identity,
            proxy_jump=jump(host.proxy_jump or config.proxy_jump, user, identity),
            internal_ip=host.internal_ip,
            blocks=host.blocks if host.blocks is not None else fleet.blocks,
            cluster_peers=peers if cluster else None,
            cluster_network=config.network if cluster else None,
        )

    return [target(index, host) for index, host in enumerate(config.hosts)]


class DeployOptions(BaseModel):
    python: str = Field(default="python3", description="the hosts' interpreter, a command or a path")
    remote_dir: str = Field(
        default="~/.ferry/agent", description="the agent's home on a host; may hold {name} and {hostname}"
    )
    known_hosts: str | None = Field(default="~/.ssh/known_hosts", description="None: accept any host key")
    connect_timeout: float = 10.0
    keepalive_interval: float = 2.0
    keepalive_count_max: int = 3
    startup_timeout: float = 60.0
    request_timeout: float = 30.0
    bundle_cache: Path | None = Field(default=None, description="FERRY_HOME/agent-bundles when None")
    # The wheels of the agent's packages for hosts whose Python is not the worker's (activities.agent_wheels).
    wheel_cache: Path | None = Field(default=None, description="FERRY_HOME/agent-wheels when None")
    wheelhouse: Path | None = Field(
        default=None, description="FERRY_AGENT_WHEELS when None: wheels to take instead of an index's"
    )


class DeployedAgent(BaseModel):
    name: str
    address: str = Field(description="the host's address for the other nodes: internal_ip or the IP dialled")
    url: str = Field(description="the local end of the tunnel")
    remote_dir: str
    remote_port: int
    pid: int = Field(description="the agent's; 0 while its supervisor starts it again")
    supervisor_pid: int = Field(description="agent/supervisor.py's, which keeps the agent running")
    bundle: str
    reused: bool
