"""The real OpenSSH client against the agent's SSH server: keys, command lines, jobs to attach to."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from agent_harness import AgentProcess, eventually, free_port, start_job, wait_terminated

from activities.agent_client import AgentClient, AgentError
from core.wire.agent_api import ContainerSpec

SSH_TIMEOUT = 60  # seconds for one client run: a bound on a hung test, never an assertion


@dataclass(frozen=True)
class UserKey:
    path: Path
    public: str  # the OpenSSH public key line


def make_key(directory: Path, name: str = "id_ed25519") -> UserKey:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"ferry-test-{name}", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return UserKey(path, path.with_suffix(".pub").read_text().strip())


def client_options(key: UserKey) -> list[str]:
    """No config, no known hosts, no agent's keys, no prompt: only `key` is offered."""
    return [
        "-F",
        "/dev/null",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "IdentityAgent=none",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=20",
        "-i",
        str(key.path),
    ]


@dataclass(frozen=True)
class Target:
    """A task to attach to, over the agent's SSH server."""

    port: int
    task_id: str

    @property
    def login(self) -> str:
        return f"{self.task_id}@127.0.0.1"

    def ssh_argv(self, key: UserKey, *args: str) -> list[str]:
        return ["ssh", *client_options(key), "-p", str(self.port), *args, self.login]

    def ssh(
        self, key: UserKey, *command: str, options: Sequence[str] = (), stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*self.ssh_argv(key, *options), *command],
            input=stdin,
            capture_output=True,
            timeout=SSH_TIMEOUT,
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )

    def scp(self, key: UserKey, *args: str, legacy: bool = False) -> subprocess.CompletedProcess[bytes]:
        """`scp`; with `legacy`, the SCP protocol (-O) rather than SFTP, OpenSSH 9's default."""
        protocol = ["-O"] if legacy else []
        argv = ["scp", *client_options(key), *protocol, "-P", str(self.port), *args]
        return subprocess.run(argv, capture_output=True, timeout=SSH_TIMEOUT, stdin=subprocess.DEVNULL)

    def sftp(self, key: UserKey, batch: str) -> subprocess.CompletedProcess[bytes]:
        argv = ["sftp", *client_options(key), "-P", str(self.port), "-b", "-", self.login]
        return subprocess.run(argv, input=batch.encode(), capture_output=True, timeout=SSH_TIMEOUT)


def require_openssh() -> None:
    """scripts/test.sh installs the OpenSSH client: a machine without it fails, never skips."""
    missing = [tool for tool in ("ssh", "scp", "sftp", "ssh-keygen") if shutil.which(tool) is None]
    assert not missing, f"the OpenSSH client is missing: {', '.join(missing)} (scripts/test.sh installs it)"


class Jobs:
    """Jobs started for a test, with the key that opens them; all ended and removed after it."""

    def __init__(self, client: AgentClient, agent: AgentProcess, port: int, key: UserKey) -> None:
        self.client = client
        self.agent = agent
        self.port = port
        self.key = key
        self.started: list[str] = []

    async def start(
        self,
        commands: list[str],
        keys: Sequence[str] | None = None,
        network: str = "host",
        container: ContainerSpec | None = None,
        **spec: object,
    ) -> Target:
        authorized = list(keys) if keys is not None else [self.key.public]
        fields = {"authorized_keys": authorized, "network": network, "container": container}
        task_id = await start_job(self.client, commands, task_fields=fields, **spec)
        self.started.append(task_id)
        return Target(self.port, task_id)

    def workdir(self, target: Target) -> Path:
        return (self.agent.data_dir / "tasks" / target.task_id / "workdir").resolve()

    async def end_all(self) -> None:
        for task_id in self.started:
            with contextlib.suppress(AgentError):
                await self.client.terminate(task_id, timeout=0)
                await wait_terminated(self.client, task_id)
                await self.client.remove(task_id)  # an isolated task's namespace goes with it


@contextlib.asynccontextmanager
async def jobs_on(client: AgentClient, agent: AgentProcess, key: UserKey) -> AsyncIterator[Jobs]:
    port = (await client.instance_info()).ssh_port
    assert port is not None
    jobs = Jobs(client, agent, port, key)
    try:
        yield jobs
    finally:
        await jobs.end_all()


async def fetch(url: str) -> str | None:
    """The body of a 200 answer from `url`; None for anything else."""
    async with httpx.AsyncClient(trust_env=False, timeout=5) as http:
        try:
            response = await http.get(url)
        except httpx.HTTPError:
            return None
    return response.text if response.status_code == 200 else None


async def fetch_through_local_forward(target: Target, key: UserKey, job_port: int, path: str) -> str:
    """`ssh -L` to the job's 127.0.0.1:`job_port`, then GET `path` through it (tried until it answers)."""
    local_port = free_port()
    forward = ["-N", "-o", "ExitOnForwardFailure=yes", "-L", f"{local_port}:127.0.0.1:{job_port}"]
    tunnel = subprocess.Popen(target.ssh_argv(key, *forward), stdin=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{local_port}/{path}"
        answer = await eventually(lambda: fetch(url), what=f"{url} through the tunnel")
        assert answer is not None
        return answer
    finally:
        tunnel.terminate()
        tunnel.wait(SSH_TIMEOUT)
