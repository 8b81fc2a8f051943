"""The agent's SSH server, with the real OpenSSH client: sessions in the job's directory and environment,
files both ways (scp, both protocols, and sftp), who is let in and who is not, the connection count."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest
from agent_harness import (
    AgentProcess,
    eventually,
    start_agent,
    stop_agent,
    wait_terminated,
)
from ssh_harness import SSH_TIMEOUT, Jobs, Target, make_key, require_openssh

from activities.agent_client import AgentClient, AgentError
from core.wire.agent_api import TaskInfo, TaskSubmitRequest

REFUSED = b"Permission denied (publickey)"


async def test_a_command_runs_in_the_jobs_working_directory_with_its_environment(jobs: Jobs) -> None:
    target = await jobs.start(["sleep 600"], env={"GREETING": "hello from env"}, working_dir="project")
    result = target.ssh(jobs.key, 'pwd -P; echo "$GREETING"; echo "$FERRY_RUN_NAME $DSTACK_RUN_NAME"; exit 7')
    assert result.returncode == 7, result.stderr
    assert result.stdout.decode().splitlines() == [
        str(jobs.workdir(target) / "project"),
        "hello from env",
        "test-run test-run",
    ]


async def test_a_terminal_session_runs_an_interactive_shell(jobs: Jobs) -> None:
    target = await jobs.start(["sleep 600"], env={"GREETING": "hello from env"})
    typed = b'echo "tty=$(tty) greeting=$GREETING"\nexit 3\n'
    result = target.ssh(jobs.key, options=["-tt"], stdin=typed)
    assert result.returncode == 3, result.stderr
    assert b"tty=/dev/pts/" in result.stdout
    assert b"greeting=hello from env" in result.stdout


@pytest.mark.parametrize("legacy", [False, True], ids=["sftp-protocol", "scp-protocol"])
async def test_scp_copies_files_in_and_out(jobs: Jobs, tmp_path: Path, legacy: bool) -> None:
    target = await jobs.start(["sleep 600"])
    local = tmp_path / "local.bin"
    local.write_bytes(os.urandom(300_000))  # several SSH packets' worth
    sent = target.scp(jobs.key, str(local), f"{target.login}:uploaded.bin", legacy=legacy)
    assert sent.returncode == 0, sent.stderr
    assert (jobs.workdir(target) / "uploaded.bin").read_bytes() == local.read_bytes()
    back = tmp_path / "back.bin"
    received = target.scp(jobs.key, f"{target.login}:uploaded.bin", str(back), legacy=legacy)
    assert received.returncode == 0, received.stderr
    assert back.read_bytes() == local.read_bytes()


async def test_sftp_starts_in_the_jobs_working_directory(jobs: Jobs, tmp_path: Path) -> None:
    target = await jobs.start(["sleep 600"])
    local = tmp_path / "local.txt"
    local.write_text("over sftp\n")
    back = tmp_path / "back.txt"
    result = target.sftp(jobs.key, f"pwd\nput {local} put.txt\nget put.txt {back}\n")
    assert result.returncode == 0, result.stderr
    assert f"Remote working directory: {jobs.workdir(target)}" in result.stdout.decode()
    assert (jobs.workdir(target) / "put.txt").read_text() == "over sftp\n"
    assert back.read_text() == "over sftp\n"


async def test_only_the_tasks_own_keys_open_it(
    jobs: Jobs, shared_agent: AgentProcess, tmp_path: Path
) -> None:
    other_user = make_key(tmp_path / "other", "id_other")
    stranger = make_key(tmp_path / "stranger", "id_stranger")
    mine = await jobs.start(["sleep 600"])
    theirs = await jobs.start(["sleep 600"], keys=[other_user.public])
    for key in (other_user, stranger):
        refused = mine.ssh(key, "echo opened")
        assert refused.returncode == 255 and REFUSED in refused.stderr, refused.stderr
        assert b"opened" not in refused.stdout
    assert theirs.ssh(other_user, "echo opened").stdout == b"opened\n"
    assert theirs.ssh(jobs.key, "echo opened").returncode == 255
    assert f"SSH login into task {mine.task_id} refused" in shared_agent.output()


async def test_an_unknown_task_is_refused(jobs: Jobs) -> None:
    result = Target(jobs.port, "no-such-task").ssh(jobs.key, "true")
    assert result.returncode == 255 and REFUSED in result.stderr, result.stderr


async def test_only_public_keys_are_offered(jobs: Jobs) -> None:
    target = await jobs.start(["sleep 600"])
    options = ["-o", "PubkeyAuthentication=no"]
    options += ["-o", "PreferredAuthentications=password,keyboard-interactive"]
    result = target.ssh(jobs.key, "true", options=options)
    assert result.returncode == 255 and REFUSED in result.stderr, result.stderr


async def test_a_login_to_a_finished_task_is_refused_saying_why(jobs: Jobs, client: AgentClient) -> None:
    target = await jobs.start(["true"])
    await wait_terminated(client, target.task_id)
    result = target.ssh(jobs.key, "echo opened")
    assert result.returncode == 255
    assert f"task '{target.task_id}' has ended".encode() in result.stderr
    assert b"opened" not in result.stdout


async def test_a_bad_authorized_key_is_refused_at_submission(client: AgentClient) -> None:
    for line in ["ssh-ed25519 AAAAnot-a-key", "not a key at all", "ssh-ed25519 AAAA\nssh-rsa AAAA"]:
        with pytest.raises(AgentError) as error:
            await client.submit_task(TaskSubmitRequest(id="bad-key", authorized_keys=[line]))
        assert error.value.status_code == 400
        assert "OpenSSH public key line" in error.value.message


async def connections_are(client: AgentClient, task_id: str, count: int) -> TaskInfo:
    async def probe() -> TaskInfo | None:
        task = await client.get_task(task_id)
        return task if task.ssh_connections == count else None

    return await eventually(probe, what=f"{count} SSH connections into {task_id}")


async def test_open_connections_are_counted_in_the_task_info(jobs: Jobs, client: AgentClient) -> None:
    target = await jobs.start(["sleep 600"])
    assert (await client.get_task(target.task_id)).ssh_last_activity is None
    before = time.time()
    session = subprocess.Popen(target.ssh_argv(jobs.key, "-N"), stdin=subprocess.DEVNULL)
    try:
        opened = await connections_are(client, target.task_id, 1)
        assert opened.ssh_last_activity is not None and opened.ssh_last_activity >= before
    finally:
        session.terminate()
        session.wait(SSH_TIMEOUT)
    closed = await connections_are(client, target.task_id, 0)
    assert closed.ssh_last_activity is not None and closed.ssh_last_activity >= opened.ssh_last_activity


async def test_the_tasks_end_closes_its_connections_and_kills_their_commands(
    jobs: Jobs, client: AgentClient
) -> None:
    target = await jobs.start(["sleep 600"])
    pid_file = jobs.workdir(target) / "session.pid"
    session = subprocess.Popen(
        target.ssh_argv(jobs.key) + ["echo $$ > session.pid; exec sleep 600"],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        await connections_are(client, target.task_id, 1)
        pid = int(await eventually(lambda: _read(pid_file), what="the session's pid"))
        await client.terminate(target.task_id, timeout=0)
        await asyncio.to_thread(session.wait, SSH_TIMEOUT)
    finally:
        session.kill()
        _, stderr = session.communicate()
    assert session.returncode == 255
    assert f"task '{target.task_id}' has ended".encode() in stderr
    await eventually(lambda: _gone(pid), what=f"the session's process {pid} killed")


async def _read(path: Path) -> str | None:
    text = path.read_text().strip() if path.exists() else ""
    return text or None


async def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_the_instance_info_names_the_port_and_the_host_key_it_keeps(tmp_path: Path) -> None:
    require_openssh()
    agent = start_agent(tmp_path / "agent")
    try:
        async with agent.client() as client:
            info = await client.instance_info()
        assert info.ssh_port is not None and info.ssh_host_key is not None
        scanned = subprocess.run(
            ["ssh-keyscan", "-t", "ed25519", "-p", str(info.ssh_port), "127.0.0.1"],
            capture_output=True,
            timeout=SSH_TIMEOUT,
        )
        assert info.ssh_host_key.encode() in scanned.stdout, scanned
    finally:
        stop_agent(agent)
    again = start_agent(tmp_path / "agent", data_dir=agent.data_dir)
    try:
        async with again.client() as client:
            assert (await client.instance_info()).ssh_host_key == info.ssh_host_key
    finally:
        stop_agent(again)
