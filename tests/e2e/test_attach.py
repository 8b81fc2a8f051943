"""`ferry attach` with the real OpenSSH client (docs/attach.md): a dev environment on the local backend,
reached as `ssh <run>` through Ferry's SSH config; a command sees the job's working directory and `env`,
files go in and out with scp and sftp, a port of the job is forwarded to localhost (the next free port
when its own is taken), another key is refused, and Ctrl-C releases the forwards."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from embedded.processes import free_port
from tests.e2e.conftest import FERRY, SMALL, Ferry


@pytest.fixture
def dev(ferry: Ferry, tmp_path: Path) -> Iterator[int]:
    """A dev environment that serves its working directory over HTTP on a port of this machine."""
    port = free_port()
    config = tmp_path / "dev.yml"
    config.write_text(
        "type: dev-environment\nname: dev\nide: vscode\nenv: [GREETING=hello]\n"
        f"ports: [{port}]\n"
        f"init: ['python3 -m http.server {port} --bind 127.0.0.1 > /dev/null 2>&1 &']\n" + SMALL
    )
    applied = ferry("apply", "-y", "-d", "-f", str(config))
    assert applied.returncode == 0, applied.stderr
    try:
        yield port
    finally:
        ferry("stop", "-y", "-x", "dev")


def _read_until(proc: subprocess.Popen[str], marker: str, limit: float = 60) -> str:
    """What `ferry attach` said on stderr until `marker` (read from the pipe itself: a buffered reader
    would hold lines that select() no longer sees)."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    said = b""
    deadline = time.monotonic() + limit
    while marker.encode() not in said:
        assert proc.poll() is None, f"ferry attach ended: {said.decode()}"
        assert time.monotonic() < deadline, f"no {marker!r} in: {said.decode()}"
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            said += os.read(fd, 65536)
    return said.decode()


def _ssh(config: Path, *args: str, tool: str = "ssh") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool, "-F", str(config), "-o", "BatchMode=yes", *args],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def start_attach(ferry: Ferry, *args: str) -> subprocess.Popen[str]:
    """`ferry attach ARGS --no-logs` in the background, its stderr to read with _read_until."""
    return subprocess.Popen(
        [*FERRY, "attach", *args, "--no-logs"],
        env=ferry.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_attach_ssh_scp_sftp_a_forward_and_a_refused_key(ferry: Ferry, dev: int, tmp_path: Path) -> None:
    attach = start_attach(ferry, "dev")
    try:
        said = _read_until(attach, "attached to run dev")
        config = ferry.home / "ssh" / "config"
        # The job's own port is taken here by the job itself (the local backend): the next one is used.
        [forward] = [line for line in said.splitlines() if line.startswith(f"port {dev} of the job")]
        local = int(forward.split("http://localhost:")[1].split()[0])
        assert local != dev and f"(port {dev} is busy here)" in forward
        [link] = [line for line in said.splitlines() if line.startswith("open in your IDE: ")]
        assert link.startswith("open in your IDE: vscode://vscode-remote/ssh-remote+dev/")
        working_dir = link.split("ssh-remote+dev", 1)[1]

        ran = _ssh(config, "dev", "pwd; echo $GREETING; echo $FERRY_RUN_NAME")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.split() == [working_dir, "hello", "dev"]

        sent = tmp_path / "sent.txt"
        sent.write_text("to the job\n")
        copied = _ssh(config, str(sent), "dev:copied.txt", tool="scp")
        assert copied.returncode == 0, copied.stderr
        assert _ssh(config, "dev", "cat copied.txt").stdout == "to the job\n"
        batch = tmp_path / "batch"
        batch.write_text(f"get copied.txt {tmp_path / 'back.txt'}\nput {sent} by-sftp.txt\n")
        fetched = _ssh(config, "-b", str(batch), "dev", tool="sftp")
        assert fetched.returncode == 0, fetched.stderr
        assert (tmp_path / "back.txt").read_text() == "to the job\n"
        assert _ssh(config, "dev", "cat by-sftp.txt").stdout == "to the job\n"

        with httpx.Client(trust_env=False, timeout=10) as client:
            listing = client.get(f"http://localhost:{local}/")
        assert listing.status_code == 200 and "copied.txt" in listing.text  # the job's own server

        stranger = tmp_path / "stranger"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
        # The same way in as `ssh dev` (its host, port and user), with only the stranger's key.
        settings = dict(line.split(" ", 1) for line in _ssh(config, "-G", "dev").stdout.splitlines())
        refused = _ssh(
            Path("/dev/null"),
            *("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"),
            *("-o", "IdentitiesOnly=yes", "-i", str(stranger), "-p", settings["port"]),
            f"{settings['user']}@{settings['hostname']}",
            "true",
        )
        assert refused.returncode == 255 and "Permission denied" in refused.stderr
    finally:
        attach.send_signal(signal.SIGINT)
        out = attach.communicate(timeout=30)[1]
    assert attach.returncode == 0, out
    assert "detached: run dev goes on" in out
    with pytest.raises(httpx.ConnectError), httpx.Client(trust_env=False, timeout=5) as client:
        client.get(f"http://localhost:{local}/")  # the forward is gone


def test_attach_to_a_finished_run_is_refused(ferry: Ferry, tmp_path: Path) -> None:
    config = tmp_path / "done.yml"
    config.write_text('type: task\nname: done-task\ncommands: ["true"]\n' + SMALL)
    assert ferry("apply", "-y", "-f", str(config)).returncode == 0
    refused = ferry("attach", "done-task")
    assert refused.returncode == 1
    assert "run done-task has finished (done): there is no job to attach to" in refused.stderr
