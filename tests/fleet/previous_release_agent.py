"""Run by tests/fleet/test_agent_releases.py with a previous release's packages first on PYTHONPATH: that
release's HostPool deploys its own agent to a host and starts a job there, then lets go of the host (its
agent and job go on). Imports nothing but the release's own packages.

    python tests/fleet/previous_release_agent.py OPTIONS_JSON TARGET_JSON TASK_ID COMMANDS_JSON

Prints one JSON line: the agent's pid and bundle, and where the release's packages were imported from.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import activities
import activities.agent_bundle
from activities.ssh import HostPool
from activities.ssh_config import DeployOptions, SSHTarget
from core.wire.agent_api import JobSpec, TaskSubmitRequest

STARTED_LIMIT = 60.0


def bundle_this_release() -> None:
    """0.1.0 lists the agent's imports with `python -I`, which drops PYTHONPATH: from a source tree, as here,
    it would bundle the installed code's agent. An installed release needs nothing; this points the
    listing at the release's own tree (later releases do so themselves, activities/agent_bundle.py)."""
    root = str(Path(activities.__path__[0]).parent)
    script = activities.agent_bundle._CLOSURE_SCRIPT
    activities.agent_bundle._CLOSURE_SCRIPT = f"import sys; sys.path.insert(0, {root!r})\n{script}"


async def main(options_json: str, target_json: str, task_id: str, commands_json: str) -> None:
    target = SSHTarget.model_validate_json(target_json)
    pool = HostPool(DeployOptions.model_validate_json(options_json))
    try:
        deployed = await pool.deploy(target)
        client = pool.client(target.name)
        await client.submit_task(TaskSubmitRequest(id=task_id))
        await client.submit_job(
            task_id, JobSpec(run_name="previous-release", commands=json.loads(commands_json))
        )
        await client.run(task_id)
        deadline = time.monotonic() + STARTED_LIMIT
        while b"started" not in (await client.pull(task_id, offset=0)).log_bytes():
            assert time.monotonic() < deadline, "the job did not start"
            await asyncio.sleep(0.1)
    finally:
        await pool.aclose()  # the connections only: the agent and its job go on
    print(json.dumps({"pid": deployed.pid, "bundle": deployed.bundle, "packages": activities.__path__[0]}))


if __name__ == "__main__":
    bundle_this_release()
    asyncio.run(main(*sys.argv[1:5]))
