"""`ferry attach` to a dev environment on an SSH fleet's host (docs/attach.md): Ferry's SSH config gets
`Host <run>-host` (the host's own sshd, with the fleet's user and key) and `Host <run>` that jumps through it
(`ProxyJump`) to the agent's SSH server on the host's loopback. The real OpenSSH client then runs a command
in the job's working directory with its `env`, on that host; `scp` copies a file in and out; and what
`ferry ps` asks of the job (its SSH connections, through the worker's tunnel to the agent) sees a
connection made through the jump."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from cli.api import FerryAPI
from cli.attach import attach
from cli.dev_environments import ask_connections, dev_views
from cli.ssh_routes import DirectRoutes
from cli.user_keys import public_key_line
from core.configuration import DevEnvironmentConfiguration, parse_configuration
from core.status import JobStatus
from testbed.fleets import SMALL, Cluster, until_ps_sees_attached, user_ssh
from testbed.netns import HostNetwork


async def test_a_dev_environment_on_a_fleet_host_is_reached_through_the_hosts_sshd(
    cluster: Cluster, network: HostNetwork, workdir: Path, tmp_path: Path
) -> None:
    home = tmp_path / "user"  # the user's FERRY_HOME: their key pair and Ferry's SSH config
    await cluster.apply()
    base = cluster.api
    api = FerryAPI(
        base.client,
        base.store,
        project=base.project,
        task_queue=base.task_queue,
        authorized_keys=[public_key_line(home)],
    )
    conf = parse_configuration(
        {
            "type": "dev-environment",
            "ide": "vscode",
            "env": ["GREETING=hello from the fleet"],
            "inactivity_duration": "1h",
            "resources": SMALL,
        }
    )
    assert isinstance(conf, DevEnvironmentConfiguration)
    record = await api.submit(conf, repo_dir=cluster.repo, run_name="fleet-dev")
    try:
        attached = await attach(DirectRoutes.over(api), home, record, Console(file=io.StringIO()))
        [job] = cluster.jobs(record)
        host = network.host(cluster.host_index(job.instance_name))
        config = attached.config

        # The route: the host's own sshd at its address, and the job's entry jumping through it.
        jump = dict(
            line.split(" ", 1)
            for line in (await user_ssh("ssh", config, "-G", "fleet-dev-host")).stdout.splitlines()
        )
        assert (jump["hostname"], jump["port"], jump["user"]) == (host.address, "22", "root")
        route = dict(
            line.split(" ", 1)
            for line in (await user_ssh("ssh", config, "-G", "fleet-dev")).stdout.splitlines()
        )
        assert (route["hostname"], route["proxyjump"], route["user"]) == (
            "127.0.0.1",
            "fleet-dev-host",
            job.id,
        )
        on_host = await user_ssh("ssh", config, "fleet-dev-host", "hostname")
        assert on_host.returncode == 0, on_host.stderr
        assert on_host.stdout.strip() == host.hostname

        # A command in the job: its working directory (on the host: under its remote dir), its env.
        ran = await user_ssh("ssh", config, "fleet-dev", "pwd; echo $GREETING; hostname")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines() == [attached.working_dir, "hello from the fleet", host.hostname]
        assert Path(attached.working_dir).is_relative_to(workdir / "hosts" / host.address)

        # A file in, and out again (the hosts share this machine's disk: it lands in the working dir).
        sent = tmp_path / "sent.txt"
        sent.write_text("to the fleet's job\n")
        copied = await user_ssh("scp", config, str(sent), "fleet-dev:copied.txt")
        assert copied.returncode == 0, copied.stderr
        assert (Path(attached.working_dir) / "copied.txt").read_text() == "to the fleet's job\n"
        back = tmp_path / "back.txt"
        fetched = await user_ssh("scp", config, "fleet-dev:copied.txt", str(back))
        assert fetched.returncode == 0, fetched.stderr
        assert back.read_text() == "to the fleet's job\n"

        # What `ferry ps` shows: the link attach printed; attached while a connection is open.
        await until_ps_sees_attached(api, config, "fleet-dev", home, record, job)
        runs = [(record, cluster.jobs(record))]
        view = dev_views(runs, home, await ask_connections(api.client, [(record, job)]))[record.id]
        assert view.link == f"vscode://vscode-remote/ssh-remote+fleet-dev{attached.working_dir}"
        assert cluster.status(record) == JobStatus.RUNNING
    finally:
        await api.stop("fleet-dev", abort=True)
        await cluster.finished(record)
    await cluster.check_idle()
