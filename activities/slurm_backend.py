"""A Slurm cluster as this worker reaches it (docs/backends.md#a-slurm-backend): one SSH connection to its
login node, Slurm's own commands run there, and tunnels through that connection to the agents on its nodes.

`SlurmBackend.submit` records nothing itself: its job name is chosen by the fleet before the call
(core.backends.slurm.job_name), and a job of that name already known to Slurm is returned instead of
submitting another, so a call repeated after the worker died mid-`sbatch` creates nothing twice. The
agent's bundle goes once to the backend's shared directory (`<directory>/bundles/`), each allocation's
token to `<directory>/groups/<job name>/token`, and each node's agent announces its port beside it
(activities/slurm_scripts.py). Compute nodes need no sshd: the worker's connections to their agents are
direct-tcpip channels of the login node's SSH connection (activities.ssh_tunnel).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shlex
from pathlib import Path
from typing import Any

import asyncssh

from activities.agent_bundle import AgentBundle
from activities.agent_client import AgentClient
from activities.agent_targets import HostPython, unsupported
from activities.host_scripts import ASK_PYTHON, RECEIVE, VERSION_SCRIPT
from activities.slurm_scripts import NODE_SCRIPT
from activities.ssh_config import DeployOptions
from activities.ssh_host import BundleSource
from activities.ssh_tunnel import LocalTunnel, open_ssh
from core.backends.slurm import (
    SQUEUE_FORMAT,
    TEST_ONLY,
    AllocationRequest,
    JobState,
    SlurmJob,
    batch_script,
    parse_scontrol,
    parse_squeue,
    parse_test_only,
    sbatch_arguments,
)
from core.configuration.backend import SlurmBackendConfiguration
from core.configuration.fleet import ProxyJump

_COMMAND_TIMEOUT = 60.0


class SlurmBackendError(RuntimeError):
    """A Slurm command, or the login node, failed; the message says why in one line."""


class SlurmRefused(SlurmBackendError):
    """Slurm refused what was asked (sbatch's error): asking again will not help."""


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


class SlurmBackend:
    """One backend of one project, as this worker reaches it."""

    def __init__(
        self,
        name: str,
        configuration: SlurmBackendConfiguration,
        login_key: str,
        options: DeployOptions,
        bundles: BundleSource,
    ) -> None:
        self.name = name
        self.configuration = configuration
        self._key = asyncssh.import_private_key(login_key)
        self._options = options
        self._bundles = bundles
        self._conn: asyncssh.SSHClientConnection | None = None
        self._jump: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._prepared: tuple[str, AgentBundle, HostPython] | None = None
        self._prepare_lock = asyncio.Lock()
        self._tunnels: dict[str, LocalTunnel] = {}

    # --- the login node ---------------------------------------------------------------------------------

    async def _open(
        self, hostname: str, port: int, user: str, tunnel: Any = ()
    ) -> asyncssh.SSHClientConnection:
        where = f"{user}@{hostname}:{port}"
        try:
            return await open_ssh(hostname, port, user, [self._key], self._options, tunnel)
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            reason = _one_line(str(exc)) or type(exc).__name__
            raise SlurmBackendError(f"backend {self.name}: cannot connect to {where}: {reason}") from exc

    async def connection(self) -> asyncssh.SSHClientConnection:
        """The login node's SSH connection, opened again (with its jump host's) when it has closed."""
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            self._close()
            login = self.configuration.login
            jump: ProxyJump | None = login.proxy_jump
            if jump is not None:
                self._jump = await self._open(jump.hostname, jump.port or 22, jump.user or login.user)
            self._conn = await self._open(login.hostname, login.port, login.user, self._jump or ())
            return self._conn

    def _close(self) -> None:
        for conn in (self._conn, self._jump):
            if conn is not None:
                conn.abort()
        self._conn = self._jump = None

    async def run(
        self, command: str, stdin: bytes | Path | None = None, timeout: float = _COMMAND_TIMEOUT
    ) -> asyncssh.SSHCompletedProcess:
        conn = await self.connection()
        try:
            if stdin is None:
                return await conn.run(command, check=False, timeout=timeout)
            if isinstance(stdin, Path):
                return await conn.run(command, check=False, timeout=timeout, stdin=stdin, encoding=None)
            return await conn.run(command, check=False, timeout=timeout, input=stdin, encoding=None)
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            reason = _one_line(str(exc)) or type(exc).__name__
            raise SlurmBackendError(f"backend {self.name}: the login node did not answer: {reason}") from exc

    async def slurm(self, *args: str, stdin: bytes | None = None, refusal: bool = False) -> str:
        """A Slurm command's output; its error in one line (SlurmRefused with `refusal`)."""
        done = await self.run(shlex.join(args), stdin)
        out, err = _text(done.stdout), _text(done.stderr)
        if done.exit_status != 0:
            said = _one_line(err or out) or f"exit status {done.exit_status}"
            said = said if said.startswith(f"{args[0]}:") else f"{args[0]}: {said}"
            raise (SlurmRefused if refusal else SlurmBackendError)(said)
        return out

    # --- the shared directory ---------------------------------------------------------------------------

    async def prepare(self) -> tuple[str, AgentBundle, HostPython]:
        """(the shared directory's absolute path, the agent's bundle there, the interpreter it is for),
        once: the login node's python3 is the nodes' (docs/backends.md#what-a-cluster-needs)."""
        async with self._prepare_lock:
            if self._prepared is None:
                self._prepared = await self._prepare()
            return self._prepared

    async def _prepare(self) -> tuple[str, AgentBundle, HostPython]:
        python = self.configuration.python
        done = await self.run(shlex.join(["sh", "-c", ASK_PYTHON, python, VERSION_SCRIPT]))
        said = HostPython.parse(_text(done.stdout)) if done.exit_status == 0 else None
        if said is None or unsupported(said) is not None:
            why = unsupported(said) if said else _one_line(_text(done.stderr)) or "no answer"
            raise SlurmRefused(f"backend {self.name}: {python} on the login node cannot run the agent: {why}")
        bundle = await self._bundles(said)
        directory = self.configuration.directory
        made = await self.run(
            "umask 077 && mkdir -p "
            + _home_path(directory)
            + "/bundles && cd "
            + _home_path(directory)
            + " && pwd"
        )
        if made.exit_status != 0:
            raise SlurmRefused(
                f"backend {self.name}: cannot make {directory}: {_one_line(_text(made.stderr))}"
            )
        base = _text(made.stdout).strip()
        archive = f"{base}/bundles/{bundle.name}.tar.gz"
        if (await self.run(shlex.join(["test", "-s", archive]))).exit_status != 0:
            sent = await self.run(shlex.join(["sh", "-c", RECEIVE, archive]), bundle.path, timeout=600)
            if sent.exit_status != 0:
                raise SlurmBackendError(
                    f"backend {self.name}: sending the agent failed: {_one_line(_text(sent.stderr))}"
                )
        return base, bundle, said

    # --- allocations ------------------------------------------------------------------------------------

    async def submit(self, request: AllocationRequest, startup_timeout: float) -> str:
        """The allocation's Slurm job id: the one of its name Slurm knows, else a new `sbatch`."""
        known = await self.jobs([request.job_name])
        active = [job for job in known if job.meaning[0] != JobState.ENDED]
        if active:
            return active[0].job_id
        base, bundle, python = await self.prepare()
        group_dir = f"{base}/groups/{request.job_name}"
        token = secrets.token_urlsafe(32)
        made = await self.run(
            f"umask 077 && mkdir -p {shlex.quote(group_dir)}/nodes && cat > {shlex.quote(group_dir)}/token",
            token.encode(),
        )
        if made.exit_status != 0:
            raise SlurmBackendError(
                f"backend {self.name}: cannot write {group_dir}: {_one_line(_text(made.stderr))}"
            )
        node_args = {
            "dir": base,
            "bundle": bundle.name,
            "archive_sha256": bundle.archive_sha256,
            "group_dir": group_dir,
            "python": python.line,
            "python_name": self.configuration.python,
            "startup_timeout": startup_timeout,
        }
        script = batch_script(
            [self.configuration.python, "-I", "-S", "-c", NODE_SCRIPT, json.dumps(node_args)]
        )
        output = f"{group_dir}/slurm-%j.out"
        said = await self.slurm(
            "sbatch", *sbatch_arguments(request, output), stdin=script.encode(), refusal=True
        )
        return said.strip().split(";")[0]

    async def start_estimate(self, request: AllocationRequest) -> tuple[float | None, str]:
        """When Slurm would start the allocation (seconds from now), or None when it refuses it, and its
        words (`sbatch --test-only`: nothing is submitted)."""
        options = [a for a in sbatch_arguments(request, "/dev/null") if a not in ("--parsable",)]
        done = await self.run(shlex.join(["sh", "-c", TEST_ONLY, "sh", *options]))
        return parse_test_only(_text(done.stdout))

    async def jobs(self, names: list[str]) -> list[SlurmJob]:
        """Slurm's jobs of these names, finished ones Slurm still remembers included."""
        if not names:
            return []
        return parse_squeue(
            await self.slurm("squeue", "-h", "-t", "all", "-n", ",".join(names), "-o", SQUEUE_FORMAT)
        )

    async def job_fields(self, job_id: str) -> dict[str, str]:
        return parse_scontrol(await self.slurm("scontrol", "-o", "show", "job", job_id))

    async def node_addresses(self, node_list: str) -> list[tuple[str, str]]:
        """(node, address) of each node of a Slurm node list (`sl[1-2]`), as slurmctld reaches them."""
        names = (await self.slurm("scontrol", "show", "hostnames", node_list)).split()
        found = []
        for name in names:
            fields = parse_scontrol(await self.slurm("scontrol", "-o", "show", "node", name))
            found.append((name, fields.get("NodeAddr") or name))
        return found

    async def announcements(self, job_name: str) -> tuple[dict[str, dict[str, Any]], str]:
        """What each node's agent announced, and the allocation's token (docs/backends.md#a-slurm-backend)."""
        base, _, _ = await self.prepare()
        group_dir = shlex.quote(f"{base}/groups/{job_name}")
        done = await self.run(
            f"cat {group_dir}/token && echo && cd {group_dir}/nodes && "
            'for f in *.json; do [ -f "$f" ] && printf "%s " "$f" && cat "$f" && echo; done; true'
        )
        lines = _text(done.stdout).splitlines()
        if done.exit_status != 0 or not lines:
            raise SlurmBackendError(
                f"backend {self.name}: cannot read {group_dir}: {_one_line(_text(done.stderr))}"
            )
        said: dict[str, dict[str, Any]] = {}
        for line in lines[1:]:
            file, _, body = line.partition(" ")
            try:
                said[file.removesuffix(".json")] = json.loads(body)
            except ValueError:
                continue
        return said, lines[0].strip()

    async def cancel(self, job_name: str) -> None:
        await self.slurm("scancel", "-n", job_name)

    async def remove_group(self, job_name: str) -> None:
        base, _, _ = await self.prepare()
        await self.run(shlex.join(["rm", "-rf", f"{base}/groups/{job_name}"]))

    # --- the agents -------------------------------------------------------------------------------------

    async def client(self, instance: str, address: str, port: int, token: str) -> AgentClient:
        """A client of the agent at address:port beyond the login node, through a local tunnel."""
        old = self._tunnels.pop(instance, None)
        if old is not None:
            old.close()
        tunnel = LocalTunnel(self.connection, lambda: (address, port), self._options.connect_timeout)
        await tunnel.start()
        self._tunnels[instance] = tunnel
        return AgentClient(f"http://127.0.0.1:{tunnel.port}", token, self._options.request_timeout)

    def forget(self, instance: str) -> None:
        tunnel = self._tunnels.pop(instance, None)
        if tunnel is not None:
            tunnel.close()

    async def aclose(self) -> None:
        for tunnel in self._tunnels.values():
            tunnel.close()
        self._tunnels.clear()
        self._close()


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")


def _home_path(directory: str) -> str:
    """A directory for `sh`, with a leading `~` left to the shell's $HOME."""
    if directory == "~" or directory.startswith("~/"):
        return '"$HOME"' + shlex.quote(directory[1:]) if directory != "~" else '"$HOME"'
    return shlex.quote(directory)
