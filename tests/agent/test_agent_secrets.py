"""A job's secrets on its agent (docs/secrets.md): in its environment, never under the data dir; a running
job keeps them across an agent restart, one not started yet ends, saying why."""

from __future__ import annotations

import hashlib
from pathlib import Path

from agent_harness import new_id, pull_all, start_agent, start_job, stop_agent, wait_for_log, wait_terminated

from agent.secret_memory import LOST
from core.status import JobTerminationReason
from core.wire.agent_api import ContainerSpec, JobSpec, RegistryCredentials, TaskStatus, TaskSubmitRequest

SECRET = "hf_agent-secret-9f2c7d"
PASSWORD = "registry-password-41ab"
PRINT_HASH = 'printf %s "$HF_TOKEN" | sha256sum | cut -d" " -f1'


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def files_holding(root: Path, *values: str) -> list[str]:
    needles = [value.encode() for value in values]
    return [
        str(path)
        for path in root.rglob("*")
        if path.is_file() and any(needle in path.read_bytes() for needle in needles)
    ]


async def test_a_job_gets_its_secrets_and_the_data_dir_never_holds_them(workspace: Path) -> None:
    agent = start_agent(workspace)
    task_id = new_id("secret")
    try:
        async with agent.client() as client:
            await start_job(client, [PRINT_HASH], task_id=task_id, secrets={"HF_TOKEN": SECRET})
            logs, _ = await pull_all(client, task_id)
            assert logs.decode().strip() == digest(SECRET)
            written = JobSpec.model_validate_json(
                (agent.data_dir / "tasks" / task_id / "job.json").read_bytes()
            )
            assert written.secrets == {"HF_TOKEN": ""}  # its name alone

            credentials = RegistryCredentials(username="robot", password=PASSWORD)
            container = ContainerSpec(image="registry.example/private:1", registry_auth=credentials)
            await client.submit_task(TaskSubmitRequest(id=new_id("pull"), container=container))
        assert files_holding(agent.data_dir, SECRET, PASSWORD) == []
        assert SECRET not in agent.output() and PASSWORD not in agent.output()
    finally:
        stop_agent(agent)


async def test_a_job_sees_nothing_of_the_agents_own_environment(workspace: Path) -> None:
    """The agent runs with FERRY_HOME and a virtualenv set, as the embedded stack starts it: its jobs see
    neither, only a login's variables, their own and Ferry's documented ones (docs/runs.md)."""
    agent_env = {"FERRY_HOME": str(workspace), "VIRTUAL_ENV": "/opt/venv", "AGENT_ONLY": "leak"}
    agent = start_agent(workspace, env=agent_env)
    try:
        async with agent.client() as client:
            task_id = await start_job(client, ["env"], env={"MINE": "1"})
            logs, _ = await pull_all(client, task_id)
        names = {line.split("=", 1)[0] for line in logs.decode().splitlines() if "=" in line}
        assert {"MINE", "PATH", "HOME", "FERRY_RUN_NAME", "DSTACK_RUN_NAME"} <= names
        assert not names & {"FERRY_HOME", "VIRTUAL_ENV", "AGENT_ONLY"}
        assert {name for name in names if name.startswith("FERRY_")} <= {
            "FERRY_" + name.removeprefix("DSTACK_") for name in names if name.startswith("DSTACK_")
        }
    finally:
        stop_agent(agent)


async def test_a_restarted_agent_ends_a_job_not_started_and_a_running_one_keeps_its_env(
    workspace: Path,
) -> None:
    agent = start_agent(workspace / "first")
    running, pending, pulling = new_id("running"), new_id("pending"), new_id("pulling")
    flag = workspace / "go"
    credentials = RegistryCredentials(username="robot", password=PASSWORD)
    pull_request = TaskSubmitRequest(
        id=pulling, container=ContainerSpec(image="registry.example/private:1", registry_auth=credentials)
    )
    try:
        async with agent.client() as client:
            waits = ["echo started", f"while [ ! -f {flag} ]; do sleep 0.02; done", PRINT_HASH]
            await start_job(client, waits, task_id=running, secrets={"HF_TOKEN": SECRET})
            await wait_for_log(client, running, b"started\n")
            await client.submit_task(TaskSubmitRequest(id=pending))
            await client.submit_job(
                pending, JobSpec(run_name="r", commands=[PRINT_HASH], secrets={"HF_TOKEN": SECRET})
            )
            await client.submit_task(pull_request)
        agent.kill()

        agent = start_agent(workspace / "second", data_dir=agent.data_dir)
        async with agent.client() as client:
            for task_id in (pending, pulling):
                ended = await client.get_task(task_id)
                assert (ended.status, ended.termination_reason, ended.termination_message) == (
                    TaskStatus.TERMINATED,
                    JobTerminationReason.EXECUTOR_ERROR,
                    LOST,
                )
            # The step that submitted the task, retried, finds it: the credentials are not compared.
            assert (await client.submit_task(pull_request)).status == TaskStatus.TERMINATED
            flag.touch()
            await wait_terminated(client, running)
            logs, _ = await pull_all(client, running)
            assert logs.decode().split() == ["started", digest(SECRET)]
        assert files_holding(agent.data_dir, SECRET, PASSWORD) == []
    finally:
        stop_agent(agent)
