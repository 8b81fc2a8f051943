"""A dev environment on a Slurm node, attached through the login node
(docs/backends.md#dev-environments-and-attach), with the compute nodes walled off from this machine as a
cluster's private network is: only the login host reaches them. `ferry attach` writes `Host <run>-login`
(the backend's login, its user and key) and `Host <run>` at the node's address jumping through it; the
real OpenSSH client then runs a command in the job on the node, copies a file in, and `ferry ps` (through
the worker's tunnel) sees the connection."""

from __future__ import annotations

import asyncio
import io
import socket
import subprocess
import uuid
from pathlib import Path

from rich.console import Console

from cli.api import FerryAPI
from cli.attach import attach
from cli.ssh_routes import DirectRoutes
from cli.user_keys import public_key_line
from core.configuration import DevEnvironmentConfiguration, parse_configuration
from testbed.fleets import until_ps_sees_attached, user_ssh
from tests.slurm.conftest import ALLOCATION_WAIT, NODE, SlurmStack


def _reaches(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except OSError:
        return False


async def test_a_dev_environment_on_a_slurm_node_is_attached_through_the_login_node(
    stack: SlurmStack,
    tmp_path: Path,
) -> None:
    home = tmp_path / "user"  # the user's FERRY_HOME: their key pair and Ferry's SSH config
    base = stack.api
    api = FerryAPI(
        base.client,
        base.store,
        project=base.project,
        task_queue=base.task_queue,
        authorized_keys=[public_key_line(home)],
    )
    stack.slurm.wall_off_nodes()
    try:
        await api.fleets().apply(stack.fleet_configuration(nodes="0..1", idle_duration="1s"))
        conf = parse_configuration(
            {
                "type": "dev-environment",
                "ide": "vscode",
                "env": ["GREETING=hello from slurm"],
                "inactivity_duration": "1h",
                "resources": NODE,
                "fleets": [stack.fleet],
            }
        )
        assert isinstance(conf, DevEnvironmentConfiguration)
        run = f"dev-{uuid.uuid4().hex[:4]}"
        record = await api.submit(conf, repo_dir=stack.repo, run_name=run)
        try:
            attached = await asyncio.wait_for(
                attach(DirectRoutes.over(api), home, record, Console(file=io.StringIO())), ALLOCATION_WAIT
            )
            [job] = api.store.list_job_submissions(record.id)
            assert job.instance_name is not None
            node = api.store.find_instance(job.instance_name)
            assert node is not None and node.address in stack.slurm.node_addresses
            config = attached.config

            # The route: the login host with the backend's user and key, the job at the node's address.
            def settings(alias: str) -> dict[str, str]:
                out = subprocess.run(
                    ["ssh", "-F", str(config), "-G", alias], capture_output=True, text=True, check=True
                ).stdout
                return dict(line.split(" ", 1) for line in out.splitlines())

            login = settings(f"{run}-login")
            assert (login["hostname"], login["port"], login["user"]) == (
                stack.slurm.login.address,
                "22",
                "root",
            )
            assert login["identityfile"] == str(stack.slurm.login.identity_file)
            route = settings(run)
            assert (route["hostname"], route["proxyjump"], route["user"]) == (
                node.address,
                f"{run}-login",
                job.id,
            )
            # The node's SSH server is not reachable from here: only through the login host.
            assert not _reaches(node.address, int(route["port"]))

            # A command in the job, on the node: its working directory, its env, the node's address.
            ran = await user_ssh("ssh", config, run, "pwd; echo $GREETING; ip -4 -o addr show")
            assert ran.returncode == 0, ran.stderr
            lines = ran.stdout.splitlines()
            assert lines[:2] == [attached.working_dir, "hello from slurm"]
            assert f"inet {node.address}/" in ran.stdout

            # A file in (the shared directory: it lands in the job's working directory, seen from here too).
            sent = tmp_path / "sent.txt"
            sent.write_text("to the slurm job\n")
            copied = await user_ssh("scp", config, str(sent), f"{run}:copied.txt")
            assert copied.returncode == 0, copied.stderr
            assert (Path(attached.working_dir) / "copied.txt").read_text() == "to the slurm job\n"

            # `ferry ps` sees a connection held open through the login node (asked through the worker).
            await until_ps_sees_attached(api, config, run, home, record, job)
        finally:
            await api.stop(run, abort=True)
            await asyncio.wait_for(api.wait(run), ALLOCATION_WAIT)
    finally:
        stack.slurm.open_nodes()
