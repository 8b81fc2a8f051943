"""One SSH fleet host (`SSHAgentHost`): its SSH connection, the agent deployed on it, and the local end of
the tunnel through which the worker reaches that agent; and the errors of deploying it.

`SSHAgentHost.deploy()` connects (key-only auth, through `proxy_jump` when set), checks the host's
`python3` (CPython 3.9 or later on Linux with glibc: the agent bundle for it, activities.agent_bundle, is
the worker's own packages on the worker's version, wheels for its version on any other; a host's version
is asked once, before the first bundle is built), sends the bundle as an exec's stdin unless
the host has it (no SFTP subsystem needed), and starts the agent detached under its supervisor
(agent/supervisor.py, which starts it again whenever it dies), bound to 127.0.0.1 on a free port with a
fresh token (mode 600) under `remote_dir`. An agent of the same bundle already supervised there is kept,
with its token: redeploying is idempotent. What runs on the host is activities/host_scripts.py.

On a host, `remote_dir` holds `bundles/<bundle>/` (unpacked once per bundle), `data/` (the agent's
tasks and logs, and the named volumes' directories: docs/volumes.md), `token` (0600), `agent.json`
(bundle, port and the supervisor's pid), `supervisor.json` (the running agent's pid, whether it is ready),
`agent.log` (the agent's and its supervisor's output) and a `lock` that serialises deployments from
several workers.

The worker reaches the agent through a local port of its own (`client` is an AgentClient on
`http://127.0.0.1:<port>`): every connection to that port opens a direct-tcpip channel over the host's SSH
connection, which is re-established on demand when it has dropped (keepalives notice a dead link), so
the URL stays the same for the host's life.

Host keys are checked against `known_hosts` (default ~/.ssh/known_hosts). `known_hosts=None` accepts any
host key: only for hosts on a network you trust (the tests' namespaces), as a man in the middle could then
take the agent's token and run commands as the fleet's user.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import shlex
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncssh

from activities.agent_bundle import AgentBundle, BundleError
from activities.agent_client import AgentClient
from activities.agent_targets import HostPython, unsupported
from activities.host_scripts import (
    ASK_PYTHON,
    CHECK_THEN_RUN,
    ENSURE_SCRIPT,
    NO_PYTHON,
    RECEIVE,
    VERSION_SCRIPT,
    WRONG_PYTHON,
)
from activities.ssh_config import DeployedAgent, DeployOptions, SSHLogin, SSHTarget
from activities.ssh_tunnel import LocalTunnel, open_ssh
from core.fleets.cluster import NotAClusterError, cluster_address, parse_probes, probe_script
from core.wire.volumes import HostDirs

# The agent bundle for a host's interpreter (HostPool.bundle); BundleError when it cannot be built.
BundleSource = Callable[[HostPython], Awaitable[AgentBundle]]


class SSHDeployError(RuntimeError):
    """The agent could not be deployed or started on a host; the message says why, in one line."""


class SSHUnreachable(SSHDeployError):
    """The host could not be reached over SSH."""


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


_SUPERVISOR_SAYS = re.compile(r"^.* ferry-supervisor\[\d+\]: ")


def _start_failure(log: str) -> str:
    """What an agent that did not start said last (a traceback's last line), else its supervisor's words."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    said = [line for line in lines if not _SUPERVISOR_SAYS.match(line)]
    last = (said or lines or ["it left no log"])[-1]
    return _one_line(_SUPERVISOR_SAYS.sub("", last))


class SSHAgentHost:
    """One host: its SSH connection (re-established on demand), its agent, and the local end of the tunnel."""

    def __init__(
        self, target: SSHTarget, options: DeployOptions, bundles: BundleSource | None = None
    ) -> None:
        self.target = target
        self.options = options
        self._bundles = bundles
        self.python: HostPython | None = None  # the host's interpreter, once it has said which
        self.bundle: AgentBundle | None = None  # the one deployed last
        self.remote_dir = options.remote_dir.format(name=target.name, hostname=target.hostname)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._jump: asyncssh.SSHClientConnection | None = None
        self._connect_lock = asyncio.Lock()
        self._deploy_lock = asyncio.Lock()
        self._tunnel = LocalTunnel(self.connection, self._destination, options.connect_timeout)
        self._remote_port: int | None = None
        self._client: AgentClient | None = None
        self._old_clients: list[AgentClient] = []
        self._token: str | None = None
        self.address = target.internal_ip or target.hostname
        self.dirs: HostDirs | None = None  # the agent's data directory and its user's home, once deployed

    @property
    def client(self) -> AgentClient:
        if self._client is None:
            raise SSHDeployError(f"{self.target.name}: the agent is not deployed")
        return self._client

    @property
    def connected(self) -> bool:
        """Whether an SSH connection is open now (a dead link closes it after the keepalives)."""
        return self._conn is not None and not self._conn.is_closed()

    # --- the SSH connection ------------------------------------------------------------------------------

    async def _open(self, endpoint: SSHLogin, tunnel: Any = ()) -> asyncssh.SSHClientConnection:
        keys = [str(Path(endpoint.identity_file).expanduser())] if endpoint.identity_file else ()
        known_hosts = (
            None if self.options.known_hosts is None else Path(self.options.known_hosts).expanduser()
        )
        where = f"{endpoint.user}@{endpoint.hostname}:{endpoint.port}"
        if known_hosts is not None and not known_hosts.is_file():
            raise SSHDeployError(
                f"{self.target.name}: no known_hosts file at {known_hosts} to check {where}'s host key: "
                "add the hosts' keys there (ssh-keyscan) or point `known_hosts` to a file that has them"
            )
        try:
            return await open_ssh(endpoint.hostname, endpoint.port, endpoint.user, keys, self.options, tunnel)
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            reason = _one_line(str(exc)) or type(exc).__name__
            raise SSHUnreachable(f"{self.target.name}: cannot connect to {where}: {reason}") from exc

    async def connection(self) -> asyncssh.SSHClientConnection:
        """The host's SSH connection, opened again (with its jump host's) when it has closed."""
        async with self._connect_lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            await self._close_connections()
            if self.target.proxy_jump is not None:
                self._jump = await self._open(self.target.proxy_jump)
            self._conn = await self._open(self.target, tunnel=self._jump or ())
            if not self.target.internal_ip and self.target.proxy_jump is None:
                peer = self._conn.get_extra_info("peername")
                self.address = str(peer[0]) if peer else self.target.hostname
            return self._conn

    async def _close_connections(self) -> None:
        for conn in (self._conn, self._jump):
            if conn is not None:
                conn.abort()
        self._conn = self._jump = None

    async def _run(
        self, command: list[str], what: str, stdin: Path | None = None, timeout: float | None = None
    ) -> asyncssh.SSHCompletedProcess:
        conn = await self.connection()
        limit = self.options.startup_timeout + 30 if timeout is None else timeout
        try:
            redirect: dict[str, Any] = {} if stdin is None else {"stdin": stdin, "encoding": None}
            return await conn.run(shlex.join(command), check=False, timeout=limit, **redirect)
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            reason = _one_line(str(exc)) or type(exc).__name__
            raise SSHUnreachable(f"{self.target.name}: {what} failed: {reason}") from exc

    # --- deploying -----------------------------------------------------------------------------------------

    def _refuse_python(self, done: asyncssh.SSHCompletedProcess, expected: HostPython | None = None) -> None:
        """The one-line error for a host whose interpreter cannot run the agent, or cannot be run."""
        python, lines = self.options.python, str(done.stdout or "").splitlines()
        said = HostPython.parse(lines[0]) if lines else None
        if done.exit_status == NO_PYTHON or said is None:
            detail = _one_line(str(done.stderr or done.stdout or "")) or f"exit status {done.exit_status}"
            raise SSHDeployError(f"{self.target.name}: cannot run {python} on the host ({detail})")
        needs = unsupported(said) or (
            f"Python {expected.version} ({expected.ext_suffix})" if expected else ""
        )
        raise SSHDeployError(
            f"{self.target.name}: {python} on the host is Python {said.version} ({said.ext_suffix}), but the "
            f"agent needs {needs}: install one there, or point FERRY_SSH_PYTHON to it"
        )

    async def _host_python(self) -> HostPython:
        """The host's interpreter: asked the first time, then the one it said last."""
        if self.python is None:
            done = await self._run(["sh", "-c", ASK_PYTHON, self.options.python, VERSION_SCRIPT], "asking")
            said = HostPython.parse(str(done.stdout or "")) if done.exit_status == 0 else None
            if said is None or unsupported(said) is not None:
                self._refuse_python(done)
            self.python = said
        assert self.python is not None
        return self.python

    async def _bundle_for(self, python: HostPython) -> AgentBundle:
        if self._bundles is None:
            raise SSHDeployError(f"{self.target.name}: no agent bundle to deploy")
        try:
            return await self._bundles(python)
        except BundleError as exc:
            raise SSHDeployError(f"{self.target.name}: {_one_line(str(exc))}") from exc

    async def _ensure(
        self, with_bundle: bool, timeout: float | None = None, **flags: bool
    ) -> tuple[dict[str, Any], AgentBundle | None]:
        """One exec: the interpreter checked, then ENSURE_SCRIPT run with it (activities/host_scripts.py);
        its JSON reply, and the bundle it was for (`with_bundle`: a probe or a stop needs none), for the
        interpreter the host said it has: when it says another (replaced since), the agent can run on, the
        exec is made again for that one. `flags`: restart, stop, probe."""
        python = await self._host_python()
        while True:
            bundle = await self._bundle_for(python) if with_bundle else None
            args = {
                "dir": self.remote_dir,
                "bundle": bundle.name if bundle else "",
                "archive_sha256": bundle.archive_sha256 if bundle else "",
                "restart": False,
                **flags,
                "startup_timeout": self.options.startup_timeout,
            }
            command = ["sh", "-c", CHECK_THEN_RUN, self.options.python, VERSION_SCRIPT, python.line]
            done = await self._run(
                [*command, ENSURE_SCRIPT, json.dumps(args)], "starting the agent", None, timeout
            )
            lines = str(done.stdout or "").splitlines()
            said = HostPython.parse(lines[0]) if done.exit_status == WRONG_PYTHON and lines else None
            if said is None or said == python or unsupported(said) is not None:
                break
            self.python = python = said
        if done.exit_status in (NO_PYTHON, WRONG_PYTHON):
            self._refuse_python(done, python)
        self.python = python
        lines = str(done.stdout or "").strip().splitlines()
        try:
            reply: dict[str, Any] = json.loads(lines[-1])
        except (IndexError, ValueError):
            detail = _one_line(str(done.stderr or done.stdout or "")) or f"exit status {done.exit_status}"
            raise SSHDeployError(f"{self.target.name}: starting the agent failed: {detail}") from None
        if reply["status"] == "error":
            if reply.get("damaged"):
                raise SSHDeployError(f"{self.target.name}: {reply['log']}")
            raise SSHDeployError(
                f"{self.target.name}: the agent cannot start with {self.options.python} on the host: "
                f"{_start_failure(reply['log'])}"
            )
        return reply, bundle

    async def _upload(self, bundle: AgentBundle, remote_path: str) -> None:
        """The bundle as the stdin of one exec: no SFTP subsystem needed."""
        done = await self._run(["sh", "-c", RECEIVE, remote_path], "sending the agent", stdin=bundle.path)
        if done.exit_status != 0:
            said = done.stderr.decode(errors="replace") if isinstance(done.stderr, bytes) else ""
            detail = _one_line(said) or f"exit status {done.exit_status}"
            raise SSHDeployError(f"{self.target.name}: sending the agent failed: {detail}")

    async def restarting(self, timeout: float) -> bool:
        """Whether the agent's supervisor is starting it again on the host (it had died): not lost."""
        try:
            reply, _ = await asyncio.wait_for(self._ensure(False, timeout, probe=True), timeout)
        except (SSHDeployError, TimeoutError):
            return False
        return reply["status"] == "restarting"

    async def deploy(self, restart: bool = False) -> tuple[DeployedAgent, bool]:
        """The host's agent, of the bundle for its interpreter, running and answering; True when its client
        changed."""
        async with self._deploy_lock:
            return await self._deploy(restart)

    async def _deploy(self, restart: bool) -> tuple[DeployedAgent, bool]:
        reply, bundle = await self._ensure(True, restart=restart)
        assert bundle is not None
        if reply["status"] == "need-bundle":
            await self._upload(bundle, reply["upload"])
            reply, bundle = await self._ensure(True, restart=restart)
            assert bundle is not None
        if reply["status"] != "running":
            raise SSHDeployError(f"{self.target.name}: the agent did not start: {reply}")
        await self._tunnel.start()
        self._remote_port = int(reply["port"])
        self.dirs = HostDirs(home=reply["home"], data_dir=f"{reply['dir']}/data")
        changed = reply["token"] != self._token
        if changed:
            if self._client is not None:
                self._old_clients.append(self._client)
            url = f"http://127.0.0.1:{self._tunnel.port}"
            self._client = AgentClient(url, reply["token"], self.options.request_timeout)
            self._token = reply["token"]
        try:
            await asyncio.wait_for(self.client.healthcheck(), self.options.connect_timeout)
        except Exception as exc:
            if reply["reused"] and not restart:  # running, yet not answering: start it again
                return await self._deploy(restart=True)
            raise SSHDeployError(
                f"{self.target.name}: the agent does not answer: {_one_line(str(exc))}"
            ) from exc
        if self.target.cluster_peers is not None:  # `placement: cluster`: docs/fleets.md#cluster-placement
            self.address = await self._cluster_address()
        self.bundle = bundle
        deployed = DeployedAgent(
            name=self.target.name,
            address=self.address,
            url=self.client.base_url,
            remote_dir=self.remote_dir,
            remote_port=self._remote_port,
            pid=int(reply["pid"]),
            supervisor_pid=int(reply["supervisor"]),
            bundle=bundle.name,
            reused=bool(reply["reused"]),
        )
        return deployed, changed

    async def _cluster_address(self) -> str:
        """Its address on the network it shares with the fleet's other hosts, as it reaches them
        (core.fleets.cluster); SSHDeployError saying which it does not reach so."""
        network = self.target.cluster_network
        internal = self.target.internal_ip
        if internal:  # the user's own word for it
            if network is not None and ipaddress.ip_address(internal) not in ipaddress.ip_network(network):
                raise SSHDeployError(
                    f"placement: cluster: {self.target.name}'s internal_ip {internal} is not in "
                    f"ssh_config.network {network}"
                )
            return internal
        peers = self.target.cluster_peers or []
        if not peers:
            return self.address
        done = await self._run(["sh", "-c", probe_script(peers)], "the cluster check", timeout=30)
        try:
            found = cluster_address(self.target.name, parse_probes(str(done.stdout or "")), network)
        except NotAClusterError as err:
            raise SSHDeployError(str(err)) from None
        return found or self.address

    async def stop_agent(self) -> None:
        await self._ensure(False, stop=True)

    # --- the tunnel ----------------------------------------------------------------------------------------

    def _destination(self) -> tuple[str, int]:
        if self._remote_port is None:
            raise SSHDeployError(f"{self.target.name}: the agent is not deployed")
        return "127.0.0.1", self._remote_port

    async def aclose(self) -> None:
        self._tunnel.close()
        for client in [*self._old_clients, *([self._client] if self._client else [])]:
            await client.aclose()
        self._client, self._old_clients = None, []
        await self._close_connections()
