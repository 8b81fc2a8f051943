"""Port forwarding through the agent's SSH server, as the job sees the network: on the host's, and inside
an isolated task's own namespace, whose loopback nothing else reaches. Remote forwards listen on loopback
only."""

from __future__ import annotations

import sys
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from agent_harness import AgentProcess, free_port, isolation_unavailable, wait_for_log
from ssh_harness import (
    Jobs,
    UserKey,
    fetch_through_local_forward,
    jobs_on,
    make_key,
    require_openssh,
)

from activities.agent_client import AgentClient
from agent.ssh_forwarding import NotLoopback, loopback_address

CLIENT_SIDE_ANSWER = b"answered on the client's side"


@pytest.fixture(params=["host", "isolated"])
def network(request: pytest.FixtureRequest) -> str:
    if request.param == "isolated":
        reason = isolation_unavailable()
        if reason is not None:
            pytest.skip(reason)
    return str(request.param)


@pytest.fixture
async def jobs(client: AgentClient, shared_agent: AgentProcess, tmp_path: Path) -> AsyncIterator[Jobs]:
    require_openssh()
    key: UserKey = make_key(tmp_path / "keys")
    async with jobs_on(client, shared_agent, key) as started:
        yield started


async def test_a_local_forward_reaches_a_port_the_job_listens_on(
    jobs: Jobs, client: AgentClient, network: str
) -> None:
    job_port = free_port()
    server = f"exec {sys.executable} -u -m http.server {job_port} --bind 127.0.0.1"
    target = await jobs.start(["echo 'served by the job' > index.html", server], network=network)
    await wait_for_log(client, target.task_id, b"Serving HTTP")
    answer = await fetch_through_local_forward(target, jobs.key, job_port, "index.html")
    assert answer == "served by the job\n"


@pytest.fixture
def client_side_server() -> Iterator[int]:
    """An HTTP server on the SSH client's side; its port."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(CLIENT_SIDE_ANSWER)))
            self.end_headers()
            self.wfile.write(CLIENT_SIDE_ANSWER)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    thread.join()


# Run in the job: fetch the remote forward's port, trying while the forward is being set up (bounded).
FETCH_SCRIPT = """
import sys, time, urllib.request
for attempt in range(200):
    try:
        sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
        break
    except OSError:
        time.sleep(0.05)
"""


async def test_a_remote_forward_lets_the_job_reach_the_client(
    jobs: Jobs, network: str, client_side_server: int
) -> None:
    target = await jobs.start(["sleep 600"], network=network)
    job_port = free_port()
    forward = ["-o", "ExitOnForwardFailure=yes", "-R", f"{job_port}:127.0.0.1:{client_side_server}"]
    command = f"{sys.executable} -c '{FETCH_SCRIPT}' http://127.0.0.1:{job_port}/"
    result = target.ssh(jobs.key, command, options=forward)
    assert result.returncode == 0, result.stderr
    assert result.stdout == CLIENT_SIDE_ANSWER


async def test_a_remote_forward_beyond_loopback_is_refused(jobs: Jobs, client_side_server: int) -> None:
    target = await jobs.start(["sleep 600"])
    elsewhere = f"10.1.2.3:{free_port()}:127.0.0.1:{client_side_server}"
    forward = ["-o", "ExitOnForwardFailure=yes", "-R", elsewhere]
    result = target.ssh(jobs.key, "echo ran", options=forward)
    assert result.returncode == 255
    assert b"remote port forwarding failed" in result.stderr
    assert b"ran" not in result.stdout


@pytest.mark.parametrize(
    ("requested", "bound"),
    [("", "127.0.0.1"), ("*", "127.0.0.1"), ("0.0.0.0", "127.0.0.1"), ("::", "127.0.0.1")]
    + [("localhost", "127.0.0.1"), ("127.0.0.2", "127.0.0.2"), ("::1", "::1")],
)
def test_a_remote_forward_listens_on_loopback(requested: str, bound: str) -> None:
    assert loopback_address(requested) == bound


@pytest.mark.parametrize("requested", ["10.1.2.3", "192.168.0.1", "example.com", "fe80::1"])
def test_a_remote_forward_elsewhere_is_refused(requested: str) -> None:
    with pytest.raises(NotLoopback):
        loopback_address(requested)
