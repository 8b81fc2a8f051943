"""The agent's API against a real agent process: auth, errors, jobs, environment, code, idempotency."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest
from agent_harness import (
    REPO_ROOT,
    AgentProcess,
    free_port,
    new_id,
    pull_all,
    start_agent,
    start_job,
    stop_agent,
    wait_for_log,
    wait_terminated,
)

from activities.agent_client import AgentClient, AgentError, AgentUnreachable
from core.status import JobStatus, JobTerminationReason
from core.wire.agent_api import (
    ClusterInfo,
    JobSpec,
    TaskStatus,
    TaskSubmitRequest,
    VolumeMount,
)


def make_archive(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def make_link_archive(name: str, target: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.type = tarfile.SYMTYPE
        info.linkname = target
        tar.addfile(info)
    return buffer.getvalue()


async def test_healthcheck_needs_no_token(shared_agent: AgentProcess) -> None:
    async with shared_agent.client(token="wrong") as anonymous:
        health = await anonymous.healthcheck()
    assert health.service == "ferry-agent"
    assert health.version


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}])
async def test_every_other_endpoint_needs_the_token(
    shared_agent: AgentProcess, headers: dict[str, str]
) -> None:
    async with httpx.AsyncClient(base_url=shared_agent.url, headers=headers) as http:
        for method, path in [
            ("GET", "/api/instance/info"),
            ("GET", "/api/tasks"),
            ("POST", "/api/tasks"),
            ("GET", "/api/tasks/x"),
            ("POST", "/api/tasks/x/terminate"),
            ("POST", "/api/tasks/x/remove"),
            ("POST", "/api/tasks/x/job"),
            ("POST", "/api/tasks/x/code"),
            ("POST", "/api/tasks/x/run"),
            ("GET", "/api/tasks/x/pull"),
            ("GET", "/api/code/" + "0" * 64),
            ("PUT", "/api/code/" + "0" * 64),
            ("POST", "/api/batches/start"),
            ("POST", "/api/batches/remove"),
        ]:
            response = await http.request(method, path)
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["detail"] == "missing or wrong bearer token"


async def test_log_stream_needs_the_token(shared_agent: AgentProcess, client: AgentClient) -> None:
    task_id = await start_job(client, ["echo hi"])
    async with shared_agent.client(token="wrong") as intruder:
        with pytest.raises(AgentError) as error:
            async for _ in intruder.stream_logs(task_id):
                pass
    assert error.value.status_code == 401


async def test_unknown_task_is_404_naming_it(client: AgentClient) -> None:
    for call in (
        client.get_task("no-such-task"),
        client.run("no-such-task"),
        client.pull("no-such-task"),
        client.terminate("no-such-task"),
        client.remove("no-such-task"),
        client.submit_job("no-such-task", JobSpec(run_name="r", commands=["true"])),
    ):
        with pytest.raises(AgentError) as error:
            await call
        assert error.value.status_code == 404
        assert "no-such-task" in error.value.message
    with pytest.raises(AgentError) as error:
        async for _ in client.stream_logs("no-such-task"):
            pass
    assert error.value.status_code == 404


async def test_bad_input_is_refused(client: AgentClient) -> None:
    async with httpx.AsyncClient(
        base_url=client.base_url, headers={"Authorization": "Bearer test-token"}
    ) as http:
        bad_id = await http.post("/api/tasks", json={"id": "../escape"})
        assert bad_id.status_code == 422
        bad_cpu = await http.post("/api/tasks", json={"id": new_id(), "resources": {"cpu": -1}})
        assert bad_cpu.status_code == 422


async def test_unreachable_agent_raises_agent_unreachable() -> None:
    async with AgentClient(f"http://127.0.0.1:{free_port()}", "token", timeout=2) as nobody:
        with pytest.raises(AgentUnreachable):
            await nobody.healthcheck()
        with pytest.raises(AgentUnreachable):
            async for _ in nobody.stream_logs("x"):
                pass


async def test_instance_info_reports_the_host(client: AgentClient) -> None:
    info = await client.instance_info()
    assert info.cpus >= 1
    assert info.memory_bytes > 0
    assert info.disk_total_bytes >= info.disk_free_bytes > 0
    assert info.gpus == []
    assert info.total.cpu == info.cpus
    assert info.agent_uid == os.geteuid()  # as placement reads it for `privileged: true` on the host


async def test_job_runs_and_reports_done(client: AgentClient) -> None:
    task_id = await start_job(client, ["echo hello from $FERRY_RUN_NAME", "echo to stderr >&2"])
    logs, states = await pull_all(client, task_id)
    assert logs == b"hello from test-run\nto stderr\n"
    assert [state.state for state in states] == [JobStatus.RUNNING, JobStatus.DONE]
    assert states[-1].termination_reason == JobTerminationReason.DONE_BY_RUNNER
    assert states[-1].exit_status == 0
    task = await client.get_task(task_id)
    assert task.status == TaskStatus.TERMINATED
    assert task.termination_reason == JobTerminationReason.DONE_BY_RUNNER
    assert task.exit_status == 0
    assert task.started_at is not None and task.finished_at is not None
    assert task_id in {listed.id for listed in await client.list_tasks()}


async def test_failing_command_stops_the_script_and_reports_its_status(client: AgentClient) -> None:
    task_id = await start_job(client, ["echo first", "sh -c 'exit 3'", "echo never printed"])
    logs, states = await pull_all(client, task_id)
    assert logs == b"first\n"
    assert states[-1].state == JobStatus.FAILED
    assert states[-1].termination_reason == JobTerminationReason.CONTAINER_EXITED_WITH_ERROR
    assert states[-1].exit_status == 3
    task = await client.get_task(task_id)
    assert task.exit_status == 3
    assert task.termination_message == "the job's commands exited with status 3"


async def test_another_shell_can_run_the_commands(client: AgentClient) -> None:
    task_id = await start_job(
        client, ['[ -z "$BASH_VERSION" ] && echo not bash', "false", "echo unreached"], shell="sh"
    )
    logs, states = await pull_all(client, task_id)
    assert logs == b"not bash\n"
    assert states[-1].exit_status == 1


async def test_environment_carries_ferry_and_dstack_variables(client: AgentClient) -> None:
    names = ["RUN_NAME", "REPLICA_NUM", "JOB_NUM", "NODE_RANK", "NODES_NUM", "MASTER_NODE_IP"]
    names += ["NODES_IPS", "GPUS_PER_NODE", "GPUS_NUM"]
    commands = [
        f'echo "{prefix}{name}=${prefix}{name}"' for prefix in ("FERRY_", "DSTACK_") for name in names
    ]
    commands += ['echo "MY_VAR=$MY_VAR SECRET=$MY_SECRET TASK_VAR=$TASK_VAR"', "pwd"]
    task_id = await start_job(
        client,
        commands,
        run_name="env-run",
        replica_num=2,
        job_num=1,
        env={"MY_VAR": "from-spec"},
        secrets={"MY_SECRET": "s3cret"},
        working_dir="sub/dir",
        cluster_info=ClusterInfo(
            node_rank=1,
            nodes_num=2,
            master_node_ip="10.0.0.1",
            node_ips=["10.0.0.1", "10.0.0.2"],
            gpus_per_node=4,
        ),
        task_fields={"env": {"TASK_VAR": "from-task"}},
    )
    logs, states = await pull_all(client, task_id)
    assert states[-1].termination_reason == JobTerminationReason.DONE_BY_RUNNER
    text = logs.decode()
    expected = {
        "RUN_NAME": "env-run",
        "REPLICA_NUM": "2",
        "JOB_NUM": "1",
        "NODE_RANK": "1",
        "NODES_NUM": "2",
        "MASTER_NODE_IP": "10.0.0.1",
        "NODES_IPS": "10.0.0.1\n10.0.0.2",
        "GPUS_PER_NODE": "4",
        "GPUS_NUM": "8",
    }
    for prefix in ("FERRY_", "DSTACK_"):
        for name, value in expected.items():
            assert f"{prefix}{name}={value}\n" in text, (prefix, name, text)
    assert "MY_VAR=from-spec SECRET=s3cret TASK_VAR=from-task\n" in text
    assert text.rstrip().endswith("/tasks/" + task_id + "/workdir/sub/dir")


async def test_submission_and_run_are_idempotent(client: AgentClient) -> None:
    task_id = new_id()
    request = TaskSubmitRequest(id=task_id, name="once")
    first = await client.submit_task(request)
    second = await client.submit_task(request)
    assert first == second
    spec = JobSpec(run_name="r", commands=["echo started $$", "sleep 0.3"])
    await client.submit_job(task_id, spec)
    runs = await asyncio.gather(*(client.run(task_id) for _ in range(5)))
    assert all(run.status in (TaskStatus.PREPARING, TaskStatus.RUNNING) for run in runs)
    assert (await client.submit_task(request)).status == TaskStatus.RUNNING
    await client.submit_job(task_id, spec)  # the same spec again is accepted
    with pytest.raises(AgentError) as error:
        await client.submit_job(task_id, JobSpec(run_name="r", commands=["echo other"]))
    assert error.value.status_code == 409
    logs, states = await pull_all(client, task_id)
    assert logs.count(b"started") == 1
    assert [state.state for state in states] == [JobStatus.RUNNING, JobStatus.DONE]
    assert (await client.run(task_id)).status == TaskStatus.TERMINATED


async def test_run_without_job_spec_is_a_conflict(client: AgentClient) -> None:
    task_id = new_id()
    await client.submit_task(TaskSubmitRequest(id=task_id))
    with pytest.raises(AgentError) as error:
        await client.run(task_id)
    assert error.value.status_code == 409
    assert "job spec" in error.value.message


async def test_code_is_checked_extracted_and_run(client: AgentClient) -> None:
    task_id = new_id()
    await client.submit_task(TaskSubmitRequest(id=task_id))
    archive = make_archive({"app/main.sh": b"echo code says hi\n", "data.txt": b"payload\n"})
    with pytest.raises(AgentError) as error:
        await client.upload_code(task_id, archive, sha256=hashlib.sha256(b"other").hexdigest())
    assert error.value.status_code == 400
    assert "sha256 mismatch" in error.value.message
    task = await client.upload_code(task_id, archive)
    assert task.code_hash == hashlib.sha256(archive).hexdigest()
    await client.upload_code(task_id, archive)  # the same archive again is a no-op
    await client.submit_job(task_id, JobSpec(run_name="r", commands=["bash app/main.sh", "cat data.txt"]))
    await client.run(task_id)
    logs, states = await pull_all(client, task_id)
    assert logs == b"code says hi\npayload\n"
    assert states[-1].exit_status == 0


@pytest.mark.parametrize("bad", ["escape", "link-out", "garbage"])
async def test_unsafe_or_corrupt_code_is_refused(client: AgentClient, bad: str) -> None:
    task_id = new_id()
    await client.submit_task(TaskSubmitRequest(id=task_id))
    archive = {
        "escape": make_archive({"../../outside.txt": b"x"}),
        "link-out": make_link_archive("evil", "/etc"),
        "garbage": b"not a tarball at all",
    }[bad]
    with pytest.raises(AgentError) as error:
        await client.upload_code(task_id, archive)
    assert error.value.status_code == 400
    assert (await client.get_task(task_id)).code_hash is None


async def test_absolute_archive_paths_stay_inside_the_workdir(
    shared_agent: AgentProcess, client: AgentClient
) -> None:
    name = f"/tmp/{new_id('absolute')}.txt"
    task_id = await start_job(client, ["true"], code=make_archive({name: b"x"}))
    await wait_terminated(client, task_id)
    assert (shared_agent.data_dir / "tasks" / task_id / "workdir" / name.lstrip("/")).read_bytes() == b"x"
    assert not Path(name).exists()


async def test_ports_are_reported_and_not_shared(client: AgentClient) -> None:
    task_id = new_id()
    task = await client.submit_task(TaskSubmitRequest(id=task_id, ports=[18080, 18081]))
    assert [(p.container_port, p.host_port) for p in task.ports] == [(18080, 18080), (18081, 18081)]
    with pytest.raises(AgentError) as error:
        await client.submit_task(TaskSubmitRequest(id=new_id(), ports=[18081]))
    assert error.value.status_code == 409
    assert "port 18081" in error.value.message
    await client.terminate(task_id)
    await client.submit_task(TaskSubmitRequest(id=new_id(), ports=[18081]))


async def test_volume_is_linked_into_the_job(client: AgentClient, workspace: Path) -> None:
    host_path = workspace / "volume"
    task_id = await start_job(
        client,
        ["echo written > data/out.txt"],
        task_fields={"volumes": [VolumeMount(host_path=str(host_path), path="data")]},
    )
    task = await wait_terminated(client, task_id)
    assert task.termination_reason == JobTerminationReason.DONE_BY_RUNNER, task
    assert (host_path / "out.txt").read_text() == "written\n"


async def test_terminating_a_pending_task_needs_no_process(client: AgentClient) -> None:
    task_id = new_id()
    await client.submit_task(TaskSubmitRequest(id=task_id))
    task = await client.terminate(task_id, JobTerminationReason.TERMINATED_BY_SERVER, "not needed")
    assert task.status == TaskStatus.TERMINATED
    assert task.termination_reason == JobTerminationReason.TERMINATED_BY_SERVER
    assert task.termination_message == "not needed"
    assert task.exit_status is None


async def test_remove_only_after_termination(shared_agent: AgentProcess, client: AgentClient) -> None:
    task_id = await start_job(client, ["echo ready", "sleep 1000"])
    await wait_for_log(client, task_id, b"ready")
    with pytest.raises(AgentError) as error:
        await client.remove(task_id)
    assert error.value.status_code == 409
    await client.terminate(task_id, timeout=0)
    await wait_terminated(client, task_id)
    removed = await client.remove(task_id)
    assert removed.id == task_id
    assert not (shared_agent.data_dir / "tasks" / task_id).exists()
    with pytest.raises(AgentError) as error:
        await client.get_task(task_id)
    assert error.value.status_code == 404


@pytest.mark.parametrize("flag", ["--host", "--ssh-host"])  # the API's and the SSH server's (docs/attach.md)
@pytest.mark.parametrize("host", ["0.0.0.0", "example.com"])
def test_non_loopback_bind_is_refused(workspace: Path, host: str, flag: str) -> None:
    token = workspace / "token"
    token.write_text("t")
    port = free_port()
    result = subprocess.run(
        [sys.executable, "-m", "agent.main", "--port", str(port), "--token-file", str(token)]
        + ["--data-dir", str(workspace / "data"), flag, host],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"refusing to bind to {host}" in result.stderr
    assert "--allow-remote" in result.stderr


def test_allow_remote_binds_beyond_loopback(workspace: Path) -> None:
    agent = start_agent(workspace, extra_args=("--host", "0.0.0.0", "--allow-remote"))
    try:
        assert httpx.get(f"{agent.url}/api/healthcheck").status_code == 200
    finally:
        stop_agent(agent)
