"""A host's agent of the previous release (docs/upgrades.md#an-ssh-hosts-agent): the release's own code
deploys its agent on a real `sshd` host and starts a job there; this code's HostPool then deploys the same
host. Its bundle differs, so the agent is replaced on the same port and data dir, and the new agent adopts
the job that still runs: this code reads its state and its whole log, stops it gracefully and removes it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from activities.ssh import HostPool
from core.status import JobTerminationReason
from core.wire.agent_api import TaskStatus
from testbed.helpers import deploy_options, eventually, target
from testbed.netns import HostNetwork
from testbed.releases import previous_release, unpack_release

pytestmark = pytest.mark.asyncio(loop_scope="module")

HOST = 1
SCRIPT = Path(__file__).with_name("previous_release_agent.py")
COMMANDS = ["trap 'echo got TERM; exit 0' TERM", "echo started", "sleep 1000 & wait"]


async def test_a_hosts_agent_of_the_previous_release_is_replaced_and_its_running_job_adopted(
    network: HostNetwork, workdir: Path, tmp_path: Path
) -> None:
    release = previous_release()
    code = unpack_release(release, tmp_path / "release")
    options = deploy_options(workdir, tmp_path / "bundles")
    host = target(network, HOST)
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    arguments = [options.model_dump_json(), host.model_dump_json(), task_id, json.dumps(COMMANDS)]
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(SCRIPT), *arguments],
        env={**os.environ, "PYTHONPATH": str(code)},
        cwd=code,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    old = json.loads(done.stdout.splitlines()[-1])
    assert old["packages"] == str(code / "activities")  # the release's code deployed that agent

    pool = HostPool(options)
    try:
        new = await pool.deploy(host)
        assert not new.reused and new.pid != old["pid"] and new.bundle != old["bundle"], (release, new)
        client = pool.client(host.name)
        assert (await client.get_task(task_id)).status == TaskStatus.RUNNING  # adopted, not restarted
        await client.terminate(task_id, reason=JobTerminationReason.TERMINATED_BY_USER, timeout=10)

        async def ended() -> bool:
            return (await client.get_task(task_id)).status == TaskStatus.TERMINATED

        await eventually(ended, what="the adopted job to end")
        assert (await client.pull(task_id, offset=0)).log_bytes() == b"started\ngot TERM\n"
        await client.remove(task_id)
        assert task_id not in [t.id for t in await client.list_tasks()]
    finally:
        await pool.remove(host.name, stop_agent=True)
