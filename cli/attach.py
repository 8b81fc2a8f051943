"""`ferry attach RUN`: the user's own OpenSSH into a running job (docs/attach.md).

The job's agent runs an SSH server on its instance (on its loopback; on a Slurm node, on the node's
addresses); the job's workflow tells where (`JobWorkflow.ssh_endpoint`). This writes `Host <run>` (and the
jump to it: `<run>-host` for an SSH fleet's host, `<run>-login` for a Slurm backend's login node) into
Ferry's SSH config, forwards the configuration's `ports` to localhost with `ssh -N -L`, prints the IDE link
of a dev environment, and follows the run's logs until Ctrl-C releases the forwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from activities.ssh_config import ssh_targets
from cli import render
from cli.context import Context, confirm
from cli.dev_environments import ide_link
from cli.errors import CommandError
from cli.follow import LogStream, follow_run
from cli.pipeline_tasks import run_jobs, task_run
from cli.ssh_hosts import (
    HostEntry,
    add_include,
    include_line,
    note_attached,
    user_config_includes,
    write_entries,
)
from cli.user_keys import user_key
from core.backends.slurm import slurm_backend_name
from core.configuration import FleetConfiguration, NotARun, parse_configuration
from core.configuration.backend import SlurmBackendConfiguration, SlurmLogin
from core.configuration.fields import PortMapping
from core.configuration.fleet import ProxyJump
from core.run_types import configurator_for
from core.status import JobStatus, RunStatus
from core.wire.messages import SSHEndpoint
from core.wire.workflow_ids import LOCAL_FLEET, job_workflow_id
from store import JobSubmissionRecord, RunRecord, Store

if TYPE_CHECKING:
    from cli.api import FerryAPI

_WAIT_POLL = 0.5
_LOGIN_TIMEOUT = 20.0
_FORWARD_START = 10.0
_NEXT_FREE_PORTS = 100  # a busy local port: the next free one within this many
_WAITS_FOR = frozenset({JobStatus.SUBMITTED, JobStatus.PROVISIONING, JobStatus.PULLING})


@dataclass
class Attached:
    """A job the user's OpenSSH reaches as `ssh <alias>`, with its forwards (local port -> job port)."""

    alias: str
    config: Path
    forwards: dict[int, int]
    working_dir: str
    forwarder: subprocess.Popen[bytes] | None = None

    def release(self) -> None:
        if self.forwarder is not None and self.forwarder.poll() is None:
            self.forwarder.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.forwarder.wait(5)


def attach_command(run_name: str, *, replica: int, job: int, logs: bool) -> int:
    """`ferry attach`: attached until Ctrl-C (or the run's end), the job's logs streamed unless not
    `logs`; the forwards released on the way out."""
    ctx = Context.from_env()
    console = render.console(stderr=True)
    return asyncio.run(_attach_and_follow(ctx, run_name, console, replica=replica, job=job, logs=logs))


async def _attach_and_follow(
    ctx: Context, run_name: str, console: Console, *, replica: int, job: int, logs: bool
) -> int:
    api = await ctx.api()
    record = await api.get_run(run_name)
    return await attach_and_follow(
        api, ctx.settings.home, record, console, replica=replica, job=job, logs=logs
    )


async def attach_and_follow(
    api: FerryAPI,
    home: Path,
    record: RunRecord,
    console: Console,
    *,
    replica: int = 0,
    job: int = 0,
    logs: bool = True,
) -> int:
    """Attached until Ctrl-C or the run's end (`ferry attach`, and `ferry apply` of a dev environment)."""
    attached = await attach(api, home, record, console, replica=replica, job=job)
    try:
        say_attached(attached, record, console)
        console.print(
            f"attached to run {record.run_name}; Ctrl-C detaches (the run goes on)", highlight=False
        )
        with open(os.devnull, "wb") as discard:
            out = sys.stdout.buffer if logs else discard
            stream = LogStream(api.store, record, out, replica=replica, job=job)
            final = await follow_run(
                api.store, record, status_console=None, on_interrupt=lambda: False, logs=stream
            )
    finally:
        attached.release()
    if RunStatus(final.status).is_finished():
        console.print(f"run {final.run_name} {final.status}: detached", highlight=False)
    else:
        console.print(
            f"detached: run {final.run_name} goes on (ferry attach {final.run_name})", highlight=False
        )
    return 0


async def attach(
    api: FerryAPI, home: Path, record: RunRecord, console: Console, *, replica: int = 0, job: int = 0
) -> Attached:
    """Wait for the job to run, write its SSH entries, open its forwards; the forwards are the caller's
    to release."""
    store = api.store
    run, submission = await _running_job(store, record, replica, job, console)
    workflow_id = job_workflow_id(run.workflow_id, replica, job, submission.submission_num)
    handle = api.client.get_workflow_handle(workflow_id)
    endpoint: SSHEndpoint = await handle.execute_update("ssh_endpoint", result_type=SSHEndpoint)
    if endpoint.refused is not None or endpoint.port is None:
        raise CommandError(f"run {record.run_name}: cannot attach: {endpoint.refused}")
    alias = record.run_name
    hosts, host_keys = await asyncio.to_thread(_route, store, home, alias, endpoint)
    config = await asyncio.to_thread(write_entries, home, alias, hosts, host_keys)
    _offer_include(home, console)
    working_dir = await _login(config, alias)
    await asyncio.to_thread(note_attached, home, alias, endpoint.user, working_dir)  # `ferry ps`'s link
    attached = Attached(alias=alias, config=config, forwards={}, working_dir=working_dir)
    conf = parse_configuration(record.configuration_data())
    ports: list[PortMapping] = []
    if not isinstance(conf, NotARun):
        # The job's own: a node group's ports are those of its nodes (docs/runs.md#node-groups).
        ports = getattr(configurator_for(conf).for_node(job).configuration, "ports", [])
    if ports:
        attached.forwards = {
            _free_local_port(p.local_port or p.container_port): p.container_port for p in ports
        }
        attached.forwarder = await _forward(config, alias, attached.forwards)
    return attached


def say_attached(attached: Attached, record: RunRecord, console: Console) -> None:
    for local, remote in attached.forwards.items():
        moved = "" if local == remote else f" (port {remote} is busy here)"
        console.print(f"port {remote} of the job: http://localhost:{local}{moved}", highlight=False)
    console.print(f"ssh: ssh {attached.alias}   (its config: {attached.config})", highlight=False)
    link = ide_link(record, attached.alias, attached.working_dir)
    if link is not None:
        console.print(f"open in your IDE: {link}", highlight=False)


async def _running_job(
    store: Store, record: RunRecord, replica: int, job: int, console: Console
) -> tuple[RunRecord, JobSubmissionRecord]:
    """The latest submission of (replica, job) (of a pipeline's latest task), once it runs, with its run;
    the reason it never will, as an error."""
    said = ""
    while True:
        run = await asyncio.to_thread(store.get_run, record.id) or record
        if RunStatus(run.status).is_finished():
            raise CommandError(
                f"run {run.run_name} has finished ({run.status}): there is no job to attach to"
            )
        current = await asyncio.to_thread(task_run, store, run, None)
        jobs = [
            j
            for j in await asyncio.to_thread(run_jobs, store, current)
            if (j.replica_num, j.job_num) == (replica, job)
        ]
        latest = max(jobs, key=lambda j: j.submission_num, default=None)
        if latest is not None and latest.status == JobStatus.RUNNING:
            return current, latest
        if latest is None and run.status not in (RunStatus.SUBMITTED, RunStatus.PENDING):
            raise CommandError(f"run {run.run_name} has no job {job} of replica {replica}")
        if latest is not None and JobStatus(latest.status) not in _WAITS_FOR:
            what = f"replica {replica}, job {job} is {latest.status}"
            raise CommandError(f"run {run.run_name}: {what}: there is nothing to attach to")
        line = f"run {run.run_name}: waiting for its job to run ({latest.status if latest else run.status})"
        if line != said:
            console.print(line, highlight=False)
            said = line
        await asyncio.sleep(_WAIT_POLL)


def _route(
    store: Store, home: Path, alias: str, endpoint: SSHEndpoint
) -> tuple[list[HostEntry], dict[str, str]]:
    """The job's `Host` entry, behind the host it is reached through when the instance is not this machine:
    an SSH fleet's host (the agent's SSH server is on its loopback), or a Slurm backend's login node (the
    agent's SSH server is on the compute node's addresses, docs/backends.md#dev-environments-and-attach)."""
    key = str(user_key(home))
    key_alias = f"ferry-agent-{endpoint.instance_name}"
    job_host = HostEntry(
        alias=alias,
        hostname="127.0.0.1",
        port=endpoint.port or 0,
        user=endpoint.user,
        identity_file=key,
        host_key_alias=key_alias,
    )
    host_keys = {key_alias: endpoint.host_key} if endpoint.host_key else {}
    instance = store.find_instance(endpoint.instance_name)
    fleet = (
        store.get_fleet(instance.project, instance.fleet)
        if instance is not None and instance.fleet != LOCAL_FLEET
        else None
    )
    if instance is None or fleet is None:
        return [job_host], host_keys
    if (backend := slurm_backend_name(fleet.backend)) is not None:
        login = _slurm_login(store, fleet.project, backend)
        hop = HostEntry(
            alias=f"{alias}-login",
            hostname=login.hostname,
            port=login.port,
            user=login.user,
            identity_file=login.identity_file,
            proxy_jump=_jump(login.proxy_jump, login.user, login.port),
        )
        job_host = dataclasses.replace(job_host, hostname=instance.address, proxy_jump=hop.alias)
        return [job_host, hop], host_keys
    conf = FleetConfiguration.model_validate(fleet.configuration_data())
    target = next((t for t in ssh_targets(conf, instance.fleet) if t.name == endpoint.instance_name), None)
    if target is None:
        return [job_host], host_keys
    jump = None
    if target.proxy_jump is not None:
        jump = f"{target.proxy_jump.user}@{target.proxy_jump.hostname}:{target.proxy_jump.port}"
    fleet_host = HostEntry(
        alias=f"{alias}-host",
        hostname=target.hostname,
        port=target.port,
        user=target.user,
        identity_file=target.identity_file,
        proxy_jump=jump,
    )
    job_host = dataclasses.replace(job_host, proxy_jump=fleet_host.alias)
    return [job_host, fleet_host], host_keys


def _slurm_login(store: Store, project: str, backend: str) -> SlurmLogin:
    record = store.get_backend(project, backend)
    if record is None:
        raise CommandError(
            f"project {project} has no backend {backend} any more: its nodes cannot be reached"
        )
    return SlurmBackendConfiguration.model_validate(record.configuration_data()).login


def _jump(hop: ProxyJump | None, user: str, port: int) -> str | None:
    """OpenSSH's ProxyJump for a login node's own `proxy_jump` (its unset fields are the login's)."""
    if hop is None:
        return None
    return f"{hop.user or user}@{hop.hostname}:{hop.port or 22}"


def _offer_include(home: Path, console: Console) -> None:
    """Once: offer to include Ferry's config in ~/.ssh/config, so that plain `ssh <run>` works."""
    user_config = Path.home() / ".ssh" / "config"
    asked = home / "ssh" / "include-asked"
    if user_config_includes(user_config, home) or asked.exists():
        return
    asked.touch(mode=0o600)  # FERRY_HOME stays private (embedded/processes.py)
    if sys.stdin.isatty() and confirm(f"Add `{include_line(home)}` to {user_config}?", yes=False):
        add_include(user_config, home)
        console.print(f"added to {user_config}: plain `ssh <run>` works from now on", highlight=False)
    else:
        console.print(f"for plain `ssh <run>`, add to {user_config}: {include_line(home)}", highlight=False)


def _ssh(config: Path, *args: str) -> list[str]:
    return ["ssh", "-F", str(config), "-o", "BatchMode=yes", *args]


async def _login(config: Path, alias: str) -> str:
    """One login (the way in works), answering the job's working directory."""
    proc = await asyncio.create_subprocess_exec(
        *_ssh(config, alias, "pwd"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), _LOGIN_TIMEOUT)
    except TimeoutError:
        proc.kill()
        raise CommandError(f"ssh {alias}: no answer in {_LOGIN_TIMEOUT:.0f} s") from None
    if proc.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        raise CommandError(f"ssh {alias}: {lines[-1] if lines else f'exit status {proc.returncode}'}")
    return out.decode().strip()


def _free_local_port(wanted: int) -> int:
    """`wanted` if nothing listens on it here, else the next free one."""
    for port in range(wanted, min(wanted + _NEXT_FREE_PORTS, 65536)):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise CommandError(f"no free local port from {wanted} to forward to")


async def _forward(config: Path, alias: str, forwards: dict[int, int]) -> subprocess.Popen[bytes]:
    """`ssh -N -L` for every port, on loopback only; once each local port answers."""
    specs = [
        arg for local, remote in forwards.items() for arg in ("-L", f"127.0.0.1:{local}:localhost:{remote}")
    ]
    args = _ssh(config, "-N", "-o", "ExitOnForwardFailure=yes", *specs, alias)
    forwarder = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = asyncio.get_running_loop().time() + _FORWARD_START
    pending = set(forwards)
    while pending:
        if forwarder.poll() is not None:
            err = (forwarder.stderr.read() if forwarder.stderr else b"").decode(errors="replace").strip()
            raise CommandError(
                f"ssh {alias}: the port forwards failed: {err.splitlines()[-1] if err else ''}"
            )
        pending = {p for p in pending if not _listening(p)}
        if asyncio.get_running_loop().time() > deadline:
            forwarder.terminate()
            raise CommandError(f"ssh {alias}: the port forwards did not open in {_FORWARD_START:.0f} s")
        await asyncio.sleep(0.1)
    return forwarder


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0
