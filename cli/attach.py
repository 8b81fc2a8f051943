"""`ferry attach RUN`: the user's own OpenSSH into a running job (docs/attach.md).

The job's agent runs an SSH server on its instance (on its loopback; on a Slurm node, on the node's
addresses); the job's workflow tells where (`JobWorkflow.ssh_endpoint`), asked by Ferry's API for a user's
CLI, by an operator's CLI itself (cli/ssh_routes.py, docs/teams.md#attach). This writes `Host <run>` (and the
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

from api.attach_messages import SSHRoute
from cli import render
from cli.context import Context, confirm
from cli.dev_environments import ide_link
from cli.errors import CommandError, RunNotFound
from cli.follow import LogStream, follow_run
from cli.remote_runs import RemoteRuns, RunsClient
from cli.ssh_hosts import (
    HostEntry,
    add_include,
    include_line,
    note_attached,
    user_config_includes,
    write_entries,
)
from cli.ssh_routes import DirectRoutes, JobRoutes, RemoteRoutes, running_job
from cli.user_keys import user_key
from core.configuration import NotARun, parse_configuration
from core.configuration.fields import PortMapping
from core.run_types import configurator_for
from core.status import RunStatus
from store import RunRecord
from store.run_reads import RunReads

if TYPE_CHECKING:
    from temporalio.client import Client

_WAIT_POLL = 0.5
_LOGIN_TIMEOUT = 20.0
_FORWARD_START = 10.0
_NEXT_FREE_PORTS = 100  # a busy local port: the next free one within this many


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
    routes = job_routes(ctx, ctx.runs())
    record = await asyncio.to_thread(routes.store.find_run, ctx.project, run_name)
    if record is None:
        raise RunNotFound(f"no run named {run_name!r} in project {ctx.project!r}")
    return await attach_and_follow(
        routes, ctx.settings.home, record, console, replica=replica, job=job, logs=logs
    )


def job_routes(ctx: Context, runs: RunsClient) -> JobRoutes:
    """The way into a run's jobs, the way its runs go (cli/context.py `Context.runs`): through the API, or
    an operator's CLI over the store and Temporal itself."""
    if isinstance(runs, RemoteRuns):
        return RemoteRoutes(runs.session, runs.store, runs.project)

    async def client() -> Client:
        return (await ctx.api()).client

    return DirectRoutes(ctx.store(), ctx.project, client)


async def attach_and_follow(
    routes: JobRoutes,
    home: Path,
    record: RunRecord,
    console: Console,
    *,
    replica: int = 0,
    job: int = 0,
    logs: bool = True,
) -> int:
    """Attached until Ctrl-C or the run's end (`ferry attach`, and `ferry apply` of a dev environment)."""
    attached = await attach(routes, home, record, console, replica=replica, job=job)
    try:
        say_attached(attached, record, console)
        console.print(
            f"attached to run {record.run_name}; Ctrl-C detaches (the run goes on)", highlight=False
        )
        with open(os.devnull, "wb") as discard:
            out = sys.stdout.buffer if logs else discard
            stream = LogStream(routes.store, record, out, replica=replica, job=job)
            final = await follow_run(
                routes.store, record, status_console=None, on_interrupt=lambda: False, logs=stream
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
    routes: JobRoutes, home: Path, record: RunRecord, console: Console, *, replica: int = 0, job: int = 0
) -> Attached:
    """Wait for the job to run, write its SSH entries, open its forwards; the forwards are the caller's
    to release."""
    await _running_job(routes.store, record, replica, job, console)
    route = await routes.ssh_route(record, replica, job)
    alias = record.run_name
    hosts = await asyncio.to_thread(_entries, route, home)
    config = await asyncio.to_thread(write_entries, home, alias, hosts, route.host_keys)
    _offer_include(home, console)
    working_dir = await _login(config, alias)
    await asyncio.to_thread(note_attached, home, alias, route.user, working_dir)  # `ferry ps`'s link
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


async def _running_job(reads: RunReads, record: RunRecord, replica: int, job: int, console: Console) -> None:
    """Until the run's job (replica, job) runs; the reason it never will, as an error."""
    said = ""
    while True:
        run = await asyncio.to_thread(reads.get_run, record.id) or record
        waits_in = await asyncio.to_thread(running_job, reads, run, replica, job)
        if not isinstance(waits_in, str):
            return
        line = f"run {run.run_name}: waiting for its job to run ({waits_in})"
        if line != said:
            console.print(line, highlight=False)
            said = line
        await asyncio.sleep(_WAIT_POLL)


def _entries(route: SSHRoute, home: Path) -> list[HostEntry]:
    """The route's entries as this machine uses them: the job's with the user's own key; a fleet host's
    or login node's key where its file is here, else none (OpenSSH then offers the user's own keys and
    agent; docs/attach.md)."""
    entries = [HostEntry(**host.model_dump()) for host in route.hosts]
    job, *hops = entries
    return [
        dataclasses.replace(job, identity_file=str(user_key(home))),
        *(
            hop
            if hop.identity_file is None or Path(hop.identity_file).expanduser().is_file()
            else dataclasses.replace(hop, identity_file=None)
            for hop in hops
        ),
    ]


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
