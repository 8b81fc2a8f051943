"""Jobs with `image`, run by the agent's container executor through Podman's Docker-compatible API
(a real `podman system service`, images built here from busybox: testbed/containers.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import httpx
from agent_harness import (
    AgentProcess,
    eventually,
    new_id,
    pull_all,
    start_agent,
    start_job,
    stop_agent,
    wait_for_log,
    wait_terminated,
)
from ssh_harness import fetch_through_local_forward, jobs_on, make_key, require_openssh

from activities.agent_client import AgentClient, AgentError
from core.status import JobStatus, JobTerminationReason
from core.wire.agent_api import ContainerSpec, VolumeMount
from testbed.containers import ENTRYPOINT_IMAGE, ENTRYPOINT_WORDS, IMAGE, PodmanService
from testbed.registry import local_registry, push_fresh_image


def container(image: str = IMAGE, **fields: Any) -> dict[str, Any]:
    return {"container": ContainerSpec(image=image, **fields)}


async def test_a_container_job_runs_to_its_end_with_its_logs_env_and_workdir(
    container_agent: AgentProcess,
) -> None:
    async with container_agent.client() as client:
        task_id = await start_job(
            client,
            ["echo out", "echo err >&2", "pwd", 'echo "run=$FERRY_RUN_NAME var=$GREETING"', "exit 3"],
            task_fields=container(),
            env={"GREETING": "hi"},
            shell="sh",
        )
        log, states = await pull_all(client, task_id)
        task = await client.get_task(task_id)
    assert log.decode().splitlines() == ["out", "err", "/workflow", "run=test-run var=hi"]
    assert task.exit_status == 3
    assert task.termination_reason == JobTerminationReason.CONTAINER_EXITED_WITH_ERROR
    assert [s.state for s in states] == [JobStatus.RUNNING, JobStatus.FAILED]


async def test_without_commands_the_image_entrypoint_runs(container_agent: AgentProcess) -> None:
    async with container_agent.client() as client:
        own = await start_job(client, [], task_fields=container(ENTRYPOINT_IMAGE))
        given = await start_job(
            client, [], task_fields=container(entrypoint=["/bin/sh", "-c", "echo given entrypoint"])
        )
        own_log, _ = await pull_all(client, own)
        given_log, _ = await pull_all(client, given)
        assert (await client.get_task(own)).exit_status == 0
    assert own_log.decode().strip() == ENTRYPOINT_WORDS
    assert given_log.decode().strip() == "given entrypoint"


async def test_a_stop_is_graceful_and_an_abort_kills(container_agent: AgentProcess) -> None:
    commands = ["trap 'echo got TERM; exit 0' TERM", "echo ready", "while true; do sleep 0.1; done"]
    async with container_agent.client() as client:
        graceful = await start_job(client, commands, task_fields=container(), shell="sh")
        aborted = await start_job(client, commands, task_fields=container(), shell="sh")
        for task_id in (graceful, aborted):
            await wait_for_log(client, task_id, b"ready")
        await client.terminate(graceful, timeout=10)
        await client.terminate(aborted, JobTerminationReason.ABORTED_BY_USER, timeout=0)
        graceful_log, _ = await pull_all(client, graceful)
        aborted_log, _ = await pull_all(client, aborted)
        graceful_task = await client.get_task(graceful)
        aborted_task = await client.get_task(aborted)
    assert b"got TERM" in graceful_log
    assert graceful_task.termination_reason == JobTerminationReason.TERMINATED_BY_USER
    assert graceful_task.exit_status == 0
    assert b"got TERM" not in aborted_log
    assert aborted_task.termination_reason == JobTerminationReason.ABORTED_BY_USER
    assert aborted_task.exit_status == 137  # SIGKILL


async def test_jobs_on_the_bridge_get_their_own_host_ports(container_agent: AgentProcess) -> None:
    serve = [
        "mkdir -p /tmp/www",
        'echo "I am $FERRY_REPLICA_NUM" > /tmp/www/index.html',
        "httpd -f -p 8080 -h /tmp/www",
    ]
    async with container_agent.client() as client:
        tasks = [
            await start_job(
                client,
                serve,
                task_fields={**container(), "ports": [8080], "network": "bridge"},
                replica_num=replica,
                shell="sh",
            )
            for replica in (0, 1)
        ]
        infos = [await client.get_task(task_id) for task_id in tasks]
        host_ports = [info.ports[0].host_port for info in infos]
        assert all(info.network == "bridge" and info.ports[0].container_port == 8080 for info in infos)
        assert len(set(host_ports)) == 2 and 8080 not in host_ports

        async def answers(port: int) -> str | None:
            try:
                async with httpx.AsyncClient() as http:
                    return (await http.get(f"http://127.0.0.1:{port}/", timeout=2)).text
            except httpx.HTTPError:
                return None

        bodies = [
            await eventually(lambda port=port: answers(port), what=f"port {port}") for port in host_ports
        ]
        for task_id in tasks:
            await client.terminate(task_id, timeout=0)
            await wait_terminated(client, task_id)
    assert [body.strip() for body in bodies] == ["I am 0", "I am 1"]


async def test_an_instance_volume_is_mounted_and_kept(container_agent: AgentProcess, tmp_path: Path) -> None:
    host_dir = tmp_path / "instance-volume"
    host_dir.mkdir()
    (host_dir / "input.txt").write_text("from the host\n")
    volumes = [
        VolumeMount(host_path=str(host_dir), path="/data"),
        VolumeMount(host_path=str(host_dir), path="rel"),
    ]
    async with container_agent.client() as client:
        task_id = await start_job(
            client,
            ["cat /data/input.txt", "echo written > /data/output.txt", "ls /workflow/rel"],
            task_fields={**container(), "volumes": volumes},
            shell="sh",
        )
        log, _ = await pull_all(client, task_id)
        assert (await client.get_task(task_id)).exit_status == 0
    assert log.decode().splitlines()[0] == "from the host"
    assert (host_dir / "output.txt").read_text() == "written\n"


async def test_a_missing_image_fails_the_job_with_the_engine_s_reason(container_agent: AgentProcess) -> None:
    async with container_agent.client() as client:
        task_id = await start_job(client, ["true"], task_fields=container("localhost:1/ferry-test/absent:1"))
        task = await wait_terminated(client, task_id)
    assert task.termination_reason == JobTerminationReason.EXECUTOR_ERROR
    assert "could not pull localhost:1/ferry-test/absent:1" in (task.termination_message or "")


async def test_an_agent_without_an_engine_says_so(tmp_path: Path) -> None:
    agent = start_agent(tmp_path, extra_args=("--container-engine", f"unix://{tmp_path}/none.sock"))
    try:
        async with agent.client() as client:
            assert (await client.instance_info()).container_engine is None
            task_id = await start_job(client, ["true"], task_fields=container())
            task = await wait_terminated(client, task_id)
    finally:
        stop_agent(agent)
    assert task.termination_reason == JobTerminationReason.EXECUTOR_ERROR
    assert "this host has no container engine" in (task.termination_message or "")


async def test_a_restarted_agent_follows_its_running_container(tmp_path: Path, podman: PodmanService) -> None:
    """SIGKILL the agent while a container job runs: the container goes on, the new agent follows it from
    where the old one left its log, and the job ends once with every line once."""
    flag = tmp_path / "flag"
    flag.parent.mkdir(exist_ok=True)
    args = ("--container-engine", podman.url)
    agent = start_agent(tmp_path / "first", extra_args=args)
    data_dir = agent.data_dir
    commands = [
        "echo started",
        "i=0",
        "while [ ! -f /flag/go ]; do i=$((i+1)); echo tick $i; sleep 0.05; done",
        "echo finished",
    ]
    volumes = [VolumeMount(host_path=str(tmp_path), path="/flag")]
    task_id = new_id("restart")
    try:
        async with agent.client() as client:
            await start_job(
                client, commands, task_id=task_id, task_fields={**container(), "volumes": volumes}, shell="sh"
            )
            await wait_for_log(client, task_id, b"tick 5")
        container_id = (data_dir / "tasks" / task_id / "container_id").read_text()
        agent.kill()
        agent = start_agent(tmp_path / "second", data_dir=data_dir, extra_args=args)
        async with agent.client() as client:
            await wait_for_log(client, task_id, b"tick 40")
            (tmp_path / "go").write_text("")
            log, _ = await pull_all(client, task_id)
            task = await client.get_task(task_id)
    finally:
        stop_agent(agent)
    lines = log.decode().splitlines()
    ticks = [line for line in lines if line.startswith("tick")]
    assert lines[0] == "started" and lines.count("started") == 1 and lines[-1] == "finished"
    assert ticks == [f"tick {n}" for n in range(1, len(ticks) + 1)]  # none lost, none twice
    assert task.exit_status == 0
    assert task.termination_reason == JobTerminationReason.DONE_BY_RUNNER
    record = json.loads((data_dir / "tasks" / task_id / "task.json").read_text())
    assert record["status"] == "terminated"
    assert (data_dir / "tasks" / task_id / "container_id").read_text() == container_id


async def test_an_image_the_host_lacks_is_pulled_and_its_progress_shown(
    container_agent: AgentProcess, podman: PodmanService, tmp_path: Path
) -> None:
    # A real pull from a registry on loopback (testbed/registry.py), slowed to last a few seconds.
    with local_registry(tmp_path / "registry", podman) as registry:
        image = push_fresh_image(podman, registry, tmp_path, megabytes=6)
        registry.relay.rate = 2_000_000
        seen: set[str] = set()
        async with container_agent.client() as client:
            task_id = new_id()
            watching = asyncio.create_task(_watch_progress(client, task_id, seen))
            await start_job(
                client, ["ls -l /noise.bin"], task_id=task_id, task_fields=container(image), shell="sh"
            )
            log, states = await pull_all(client, task_id)
            watching.cancel()
            task = await client.get_task(task_id)
    assert task.exit_status == 0 and "noise.bin" in log.decode(), task.termination_message
    assert task.progress is None  # said while the pull lasted only
    # Podman says the layer's bytes as they arrive: `pulling IMAGE: 0/1 layers, 4.8/7.1 MB`.
    assert any(line.startswith(f"pulling {image}: 0/1 layers, ") and "MB" in line for line in seen), seen


async def _watch_progress(client: AgentClient, task_id: str, seen: set[str]) -> None:
    while True:
        with contextlib.suppress(AgentError):
            progress = (await client.get_task(task_id)).progress
            if progress is not None:
                seen.add(progress)
        await asyncio.sleep(0.05)


async def test_a_forward_reaches_the_loopback_of_a_bridged_container(
    container_agent: AgentProcess, tmp_path: Path
) -> None:
    # busybox httpd on the container's own 127.0.0.1, published nowhere: only a forward made inside the
    # container's network namespace reaches it (docs/containers.md#networks).
    require_openssh()
    key = make_key(tmp_path / "keys")
    serve = [
        "mkdir -p /tmp/www",
        "echo boxed > /tmp/www/index.html",
        "echo serving",
        "httpd -f -p 127.0.0.1:8000 -h /tmp/www",
    ]
    async with container_agent.client() as client, jobs_on(client, container_agent, key) as jobs:
        target = await jobs.start(serve, network="bridge", container=ContainerSpec(image=IMAGE), shell="sh")
        await wait_for_log(client, target.task_id, b"serving")
        assert await fetch_through_local_forward(target, key, 8000, "index.html") == "boxed\n"
