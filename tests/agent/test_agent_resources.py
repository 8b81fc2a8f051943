"""Resource accounting against an agent that sees four fake GPUs through a fake `nvidia-smi`."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
from agent_harness import (
    AgentProcess,
    new_id,
    start_agent,
    start_job,
    stop_agent,
    wait_for_log,
    wait_terminated,
)

from activities.agent_client import AgentClient, AgentError
from core.status import JobTerminationReason
from core.wire.agent_api import Resources, TaskSubmitRequest

FAKE_NVIDIA_SMI = """#!/bin/sh
# Answers the agent's query like a host with four A100s.
for i in 0 1 2 3; do echo "$i, NVIDIA A100-SXM4-80GB, 81920"; done
"""


@pytest.fixture(scope="module")
def gpu_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    workspace = tmp_path_factory.mktemp("gpu-agent")
    bin_dir = workspace / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI)
    fake.chmod(0o755)
    agent = start_agent(workspace, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    yield agent
    stop_agent(agent)


@pytest.fixture
async def gpu_client(gpu_agent: AgentProcess) -> AsyncIterator[AgentClient]:
    async with gpu_agent.client() as agent_client:
        yield agent_client


async def cuda_visible_devices(client: AgentClient, task_id: str) -> list[int]:
    logs = await wait_for_log(client, task_id, b"\n")
    value = logs.decode().split("\n")[0].removeprefix("CVD=")
    return [int(index) for index in value.split(",") if index]


async def test_gpus_are_read_with_nvidia_smi(gpu_client: AgentClient) -> None:
    info = await gpu_client.instance_info()
    assert [(gpu.index, gpu.name, gpu.memory_mib) for gpu in info.gpus] == [
        (index, "NVIDIA A100-SXM4-80GB", 81920) for index in range(4)
    ]
    assert info.total.gpu == 4


async def test_concurrent_tasks_never_share_a_gpu(gpu_client: AgentClient) -> None:
    commands = ['echo "CVD=$CUDA_VISIBLE_DEVICES"', "sleep 1000"]
    first = await start_job(gpu_client, commands, resources=Resources(gpu=2))
    second = await start_job(gpu_client, commands, resources=Resources(gpu=2))
    first_gpus = (await gpu_client.get_task(first)).gpu_indices
    second_gpus = (await gpu_client.get_task(second)).gpu_indices
    assert len(first_gpus) == len(second_gpus) == 2
    assert not set(first_gpus) & set(second_gpus)
    assert await cuda_visible_devices(gpu_client, first) == first_gpus
    assert await cuda_visible_devices(gpu_client, second) == second_gpus
    assert (await gpu_client.instance_info()).free_gpu_indices == []

    third_id = new_id()
    with pytest.raises(AgentError) as error:
        await gpu_client.submit_task(TaskSubmitRequest(id=third_id, resources=Resources(gpu=2)))
    assert error.value.status_code == 409
    assert "GPU: requested 2, free 0 of 4" in error.value.message

    # A task with no GPU sees none, rather than its neighbours'.
    cpu_only = await start_job(gpu_client, commands)
    assert await cuda_visible_devices(gpu_client, cpu_only) == []

    # Resources come back when a task terminates, not only when it is removed.
    await gpu_client.terminate(first, timeout=0)
    await wait_terminated(gpu_client, first)
    third = await start_job(gpu_client, commands, task_id=third_id, resources=Resources(gpu=2))
    assert sorted(await cuda_visible_devices(gpu_client, third)) == sorted(first_gpus)
    for task_id in (second, third, cpu_only):
        await gpu_client.terminate(task_id, timeout=0)
        await wait_terminated(gpu_client, task_id)
    assert (await gpu_client.instance_info()).free_gpu_indices == [0, 1, 2, 3]


async def test_cpu_and_memory_that_do_not_fit_are_refused(gpu_client: AgentClient) -> None:
    info = await gpu_client.instance_info()
    with pytest.raises(AgentError) as error:
        await gpu_client.submit_task(TaskSubmitRequest(id=new_id(), resources=Resources(cpu=info.cpus + 1)))
    assert error.value.status_code == 409
    assert f"CPU: requested {info.cpus + 1}" in error.value.message
    with pytest.raises(AgentError) as error:
        await gpu_client.submit_task(TaskSubmitRequest(id=new_id(), resources=Resources(memory=10**6)))
    assert "memory: requested 1000000GB" in error.value.message

    half = info.cpus / 2
    holders = [new_id() for _ in range(2)]
    for holder in holders:
        await gpu_client.submit_task(TaskSubmitRequest(id=holder, resources=Resources(cpu=half, memory=0.5)))
    assert (await gpu_client.instance_info()).free.cpu == 0
    with pytest.raises(AgentError):
        await gpu_client.submit_task(TaskSubmitRequest(id=new_id(), resources=Resources(cpu=0.1)))
    await gpu_client.submit_task(TaskSubmitRequest(id=new_id(), resources=Resources(cpu=0)))  # nothing asked
    for holder in holders:
        task = await gpu_client.terminate(holder, JobTerminationReason.TERMINATED_BY_SERVER)
        assert task.status == "terminated"
    assert (await gpu_client.instance_info()).free.cpu == info.cpus
