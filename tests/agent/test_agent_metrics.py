"""`GET /api/tasks/{id}/metrics` on a real agent (docs/jobs.md#metrics): jobs that burn CPU, hold memory or
idle, process and container jobs; and the parsing of what nvidia-smi and a container engine answer."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from agent_harness import AgentProcess, eventually, new_id, start_job, wait_for_log, wait_terminated

from activities.agent_client import AgentClient, AgentError
from agent.gpus import parse_gpu_use
from agent.metrics import WINDOW, container_stats_reading
from core.wire.agent_api import BYTES_PER_GB, ContainerSpec, GpuUse, Resources, TaskMetrics, TaskSubmitRequest
from testbed.containers import IMAGE

BURN = "python3 -c 'while True: pass'"
MB = 2**20


async def busy(client: AgentClient, task_id: str) -> TaskMetrics:
    """Its metrics once they show the CPU busy (the process starts within the first window)."""

    async def probe() -> TaskMetrics | None:
        metrics = await client.task_metrics(task_id)
        return metrics if metrics.cpu_percent > 30 else None

    return await eventually(probe, timeout=30, interval=0.2, what=f"{task_id} busy")


async def test_a_job_that_burns_cpu_shows_it(client: AgentClient) -> None:
    task_id = await start_job(client, [BURN], resources=Resources(cpu=1))
    try:
        metrics = await busy(client, task_id)
    finally:
        await client.terminate(task_id, timeout=0)
    # One core: 100%, less what a shared machine takes from it; never more than the host's cores.
    assert 30 < metrics.cpu_percent <= 100 * 2 + 5
    assert (metrics.task_id, metrics.source, metrics.cpus) == (task_id, "processes", 1)
    assert metrics.window_seconds > 0
    assert metrics.processes is not None and metrics.processes >= 2  # the wrapper, its shell, python
    assert metrics.gpus == []  # no GPU asked for (and none on this host)


async def test_a_job_that_holds_memory_shows_it_against_what_it_was_granted(client: AgentClient) -> None:
    # Written, not only allocated: pages never touched are not resident.
    hold = (
        'python3 -c \'import time; data = b"x" * 100 * 2**20; print("ready", flush=True); time.sleep(600)\''
    )
    task_id = await start_job(client, [hold], resources=Resources(memory=1))
    try:
        await wait_for_log(client, task_id, b"ready")
        metrics = await client.task_metrics(task_id)
    finally:
        await client.terminate(task_id, timeout=0)
    assert metrics.memory_used_bytes > 80 * MB
    assert metrics.memory_limit_bytes == 1 * BYTES_PER_GB


async def test_an_idle_job_shows_almost_nothing_and_the_next_ask_measures_since_the_last(
    client: AgentClient,
) -> None:
    task_id = await start_job(client, ["sleep 600"])
    info = await client.instance_info()
    try:
        first = await client.task_metrics(task_id)
        await asyncio.sleep(1.5)
        second = await client.task_metrics(task_id)
    finally:
        await client.terminate(task_id, timeout=0)
    assert first.cpu_percent < 5 and second.cpu_percent < 5
    assert first.window_seconds >= WINDOW  # nothing kept: two readings, WINDOW apart
    assert second.window_seconds >= 1.5  # the first ask's reading was kept: measured since
    assert 0 < first.memory_used_bytes < 100 * MB
    assert first.memory_limit_bytes == info.memory_bytes  # it asked for no memory: the host's


async def test_only_a_running_job_has_metrics(client: AgentClient) -> None:
    pending = new_id()
    await client.submit_task(TaskSubmitRequest(id=pending))
    ended = await start_job(client, ["true"])
    await wait_terminated(client, ended)
    refusals = {}
    for task_id in (pending, ended, "no-such-task"):
        with pytest.raises(AgentError) as refused:
            await client.task_metrics(task_id)
        refusals[task_id] = (refused.value.status_code, refused.value.message)
    assert refusals == {
        pending: (409, f"task {pending!r} is pending: only a running job has metrics"),
        ended: (409, f"task {ended!r} is terminated: only a running job has metrics"),
        "no-such-task": (404, "task 'no-such-task' not found"),
    }


async def test_metrics_need_the_token(shared_agent: AgentProcess, client: AgentClient) -> None:
    task_id = await start_job(client, ["sleep 600"])
    try:
        url = f"{shared_agent.url}/api/tasks/{task_id}/metrics"
        async with httpx.AsyncClient() as http:
            without = await http.get(url)
            wrong = await http.get(url, headers={"Authorization": "Bearer wrong"})
            right = await http.get(url, headers={"Authorization": f"Bearer {shared_agent.token}"})
    finally:
        await client.terminate(task_id, timeout=0)
    assert (without.status_code, wrong.status_code, right.status_code) == (401, 401, 200)
    assert TaskMetrics.model_validate_json(right.content).task_id == task_id


async def test_a_container_job_is_measured_by_its_engine(container_agent: AgentProcess) -> None:
    spec = ContainerSpec(image=IMAGE)
    async with container_agent.client() as client:
        task_id = await start_job(
            client,
            ["while :; do :; done"],
            resources=Resources(memory=0.5),
            task_fields={"container": spec},
            shell="sh",
        )
        try:
            metrics = await busy(client, task_id)
        finally:
            await client.terminate(task_id, timeout=0)
    assert metrics.source == "container"
    assert metrics.memory_limit_bytes == BYTES_PER_GB // 2  # the container's limit, as its engine says
    assert 0 < metrics.memory_used_bytes < 100 * MB


# --- what the agent reads, as recorded ------------------------------------------------------------------

# `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits
# --id=0,1` on an H100 host, and a MIG instance's line, which reads [N/A] for utilization.
NVIDIA_SMI_USE = """\
0, 87, 61234, 81559
1, 0, 4, 81559
3, [N/A], 9856, [Not Supported]
"""


def test_nvidia_smi_use_is_parsed_per_gpu_with_na_as_unknown() -> None:
    assert parse_gpu_use(NVIDIA_SMI_USE) == [
        GpuUse(index=0, utilization_percent=87, memory_used_bytes=61234 * MB, memory_total_bytes=81559 * MB),
        GpuUse(index=1, utilization_percent=0, memory_used_bytes=4 * MB, memory_total_bytes=81559 * MB),
        GpuUse(index=3, utilization_percent=None, memory_used_bytes=9856 * MB, memory_total_bytes=None),
    ]
    assert parse_gpu_use("") == []


def docker_stats(usage_ns: int, memory: dict[str, Any]) -> dict[str, Any]:
    return {"cpu_stats": {"cpu_usage": {"total_usage": usage_ns}}, "memory_stats": memory, "pids_stats": {}}


def test_a_container_s_stats_count_its_memory_as_docker_stats_does() -> None:
    # Docker on cgroup v2 lists inactive_file, v1 total_inactive_file; podman neither.
    v2 = {"usage": 300 * MB, "limit": BYTES_PER_GB, "stats": {"inactive_file": 100 * MB}}
    v1 = {"usage": 300 * MB, "limit": BYTES_PER_GB, "stats": {"total_inactive_file": 50 * MB}}
    reading = container_stats_reading(docker_stats(2_500_000_000, v2), at=7.0)
    assert (reading.at, reading.cpu_seconds, reading.memory_used) == (7.0, 2.5, 200 * MB)
    assert (reading.memory_limit, reading.processes) == (BYTES_PER_GB, None)
    assert container_stats_reading(docker_stats(0, v1), at=0).memory_used == 250 * MB
    podman = {"usage": 600 * 1024, "limit": BYTES_PER_GB}
    assert container_stats_reading(docker_stats(0, podman), at=0).memory_used == 600 * 1024
