"""SSH fleet test helpers: deployment settings for namespaced hosts, and running a job on an agent."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from activities.agent_client import AgentClient
from activities.ssh import DeployOptions, SSHTarget
from core.wire.agent_api import JobSpec, TaskSubmitRequest
from testbed.netns import HostNetwork

T = TypeVar("T")


# What the tests keep between runs on one machine, outside the repository: the agent's wheels for other
# Pythons (activities/agent_wheels.py) and the Debian roots of testbed/debian_roots.py.
MACHINE_CACHE = Path(os.environ.get("FERRY_TEST_CACHE") or "/var/cache/ferry-test")

# The hosts' interpreter is the distribution's own (Debian 12's 3.11.2 here; scripts/test.sh installs
# it), not the worker's: a host runs the agent on the Python it ships (docs/fleets.md#ssh-fleets).
DISTRIBUTION_PYTHON = "/usr/bin/python3"


def host_python() -> str:
    """The hosts' `python3`: the distribution's, run bare (the worker's virtualenv may be made from it).
    Where it is missing, deploying says so: `cannot run /usr/bin/python3 on the host`."""
    return DISTRIBUTION_PYTHON


def deploy_options(workdir: Path, bundle_cache: Path, **changes: object) -> DeployOptions:
    """Each host its own remote dir (they share this filesystem); short keepalives to notice a cut link."""
    options = DeployOptions(
        python=host_python(),
        remote_dir=str(workdir / "hosts" / "{hostname}"),
        known_hosts=None,  # the namespaces' host keys are made for the run
        connect_timeout=5.0,
        keepalive_interval=1.0,
        keepalive_count_max=2,
        bundle_cache=bundle_cache,
        wheel_cache=MACHINE_CACHE / "agent-wheels",
    )
    return options.model_copy(update=changes)


def target(network: HostNetwork, k: int, **changes: object) -> SSHTarget:
    host = network.host(k)
    fields = {
        "name": f"fleet-{k}",
        "hostname": host.address,
        "user": "root",
        "identity_file": str(network.key),
    }
    return SSHTarget.model_validate({**fields, **changes})


def leftover_processes(marker: Path) -> list[str]:
    """Command lines of live processes that name `marker` (sshd configs, agents, jobs under it)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = (
                    Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue
            if str(marker) in cmdline:
                found.append(cmdline)
    return found


async def eventually(probe: Callable[[], Awaitable[T | None]], timeout: float = 30.0, what: str = "") -> T:
    """Polls until `probe` returns something but None or False: bounded waiting, not a timing assertion."""
    deadline = time.monotonic() + timeout
    while True:
        result = await probe()
        if result is not None and result is not False:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.1)


async def run_job(client: AgentClient, commands: list[str]) -> tuple[str, int | None]:
    """A job through the agent's shim and runner roles: its whole log and its exit status."""
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    await client.submit_task(TaskSubmitRequest(id=task_id))
    await client.submit_job(task_id, JobSpec(run_name="fleet-test", commands=commands))
    await client.run(task_id)
    log, offset = b"", 0

    async def finished() -> bool:
        nonlocal log, offset
        reply = await client.pull(task_id, offset=offset)
        log += reply.log_bytes()
        offset = reply.next_offset
        return reply.finished and not reply.has_more

    await eventually(finished, what=f"job {task_id} to finish")
    task = await client.get_task(task_id)
    await client.remove(task_id)
    return log.decode(), task.exit_status
