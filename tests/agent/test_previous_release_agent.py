"""This code's worker in front of the previous release's agent: between the worker's replacement and the
agent's (docs/upgrades.md#upgrading-the-embedded-stack), the new worker submits jobs to the old agent. A
job that uses nothing new must be taken: the worker leaves out what the agent would fill in itself (its
defaults), so a field the old agent does not know reaches it only where the job uses it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from agent_harness import AgentProcess, free_port, stop_agent, wait_healthy

from core.configuration import TaskConfiguration, parse_configuration
from core.run_types import configurator_for
from core.wire.agent_api import TaskStatus, TaskSubmitRequest
from testbed.releases import previous_release, unpack_release


def start_previous_agent(tmp_path: Path) -> AgentProcess:
    code = unpack_release(previous_release(), tmp_path / "release")
    token_file = tmp_path / "token"
    token_file.write_text("test-token\n")
    token_file.chmod(0o600)
    port = free_port()
    log_path = tmp_path / "agent.log"
    command = [sys.executable, "-m", "agent.main", "--port", str(port), "--token-file", str(token_file)]
    command += ["--data-dir", str(tmp_path / "data"), "--log-level", "warning"]
    with open(log_path, "wb") as log:  # the release's directory first: its own agent (sys.path[0])
        process = subprocess.Popen(
            command,
            cwd=code,
            env={**os.environ, "PYTHONPATH": str(code)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    agent = AgentProcess(process, port, "test-token", tmp_path / "data", log_path)
    wait_healthy(agent)
    return agent


async def test_the_previous_releases_agent_takes_a_plain_job_of_this_worker(tmp_path: Path) -> None:
    agent = start_previous_agent(tmp_path)
    try:
        conf = parse_configuration({"type": "task", "commands": ["echo from this worker"]})
        assert isinstance(conf, TaskConfiguration)
        spec = configurator_for(conf).job_spec(run_name="old", replica_num=0, job_num=0, repo_id="r")
        async with agent.client() as client:
            await client.submit_task(TaskSubmitRequest(id="plain"))
            await client.submit_job("plain", spec)  # refused (422) while every default was sent
            await client.run("plain")
            for _ in range(200):
                task = await client.get_task("plain")
                if task.status == TaskStatus.TERMINATED:
                    break
                await asyncio.sleep(0.05)
            pulled = await client.pull("plain", offset=0)
            assert b"from this worker" in pulled.log_bytes(), task
    finally:
        stop_agent(agent)
