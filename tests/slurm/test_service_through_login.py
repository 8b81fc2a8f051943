"""A service on Slurm nodes that only the login node reaches (docs/services.md#replicas-behind-a-login-node):
with the compute nodes walled off from this machine as a cluster's private network is
(`SlurmCluster.wall_off_nodes`), the worker probes each replica and the real proxy forwards to it through
the backend's login node. Each replica answers with the address its requests came from, which is the login
host's, for the proxy's requests and the worker's probes alike."""

from __future__ import annotations

import asyncio
import shlex
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from core.configuration import ServiceConfiguration, parse_configuration
from gateway.app import Gateway, make_runner
from gateway.options import GatewayOptions
from store import ServiceReplicaRecord, Store
from testbed.fleets import until
from tests.slurm.conftest import ALLOCATION_WAIT, NODE, SlurmStack

# Answers each GET with the peer address it came from; /peers with every peer seen so far.
WHOAMI = """
import http.server, sys
peers = set()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        peers.add(self.client_address[0])
        said = " ".join(sorted(peers)) if self.path == "/peers" else self.client_address[0]
        body = said.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("", int(sys.argv[1])), Handler).serve_forever()
"""


def whoami(stack: SlurmStack, port: int, **fields: Any) -> ServiceConfiguration:
    conf = parse_configuration(
        {
            "type": "service",
            "port": port,
            "auth": False,
            "commands": [f"exec python3 -c {shlex.quote(WHOAMI)} {port}"],
            "resources": NODE,
            "fleets": [stack.fleet],
            **fields,
        }
    )
    assert isinstance(conf, ServiceConfiguration)
    return conf


@asynccontextmanager
async def proxy(store: Store) -> AsyncIterator[tuple[Gateway, str]]:
    """The real proxy, in-process, on a free port of 127.0.0.1."""
    gateway = Gateway(
        store,
        public_url="http://127.0.0.1",
        options=GatewayOptions(refresh_interval=0.05, flush_interval=0.2, hold_timeout=60.0),
    )
    runner = make_runner(gateway)
    await runner.setup()
    try:
        await gateway.site(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        yield gateway, f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def reaches(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except OSError:
        return False


async def test_a_service_on_walled_off_slurm_nodes_is_probed_and_served_through_the_login_node(
    stack: SlurmStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The proxy checks the login host's key as the worker does; the test cluster's keys are made for the
    # run (testbed.helpers.deploy_options accepts any, as this does).
    monkeypatch.setenv("FERRY_SSH_KNOWN_HOSTS", "none")
    login = stack.slurm.login.address
    stack.slurm.wall_off_nodes()
    try:
        async with proxy(stack.api.store) as (gateway, url):
            await stack.api.fleets().apply(stack.fleet_configuration(nodes="0..2", idle_duration="1s"))
            # One service probed over HTTP (the worker's tunnel), one by its port alone (a channel of the
            # login connection: the tunnel's own port would always accept).
            runs = {
                f"web-{uuid.uuid4().hex[:4]}": whoami(stack, 8000, probes=[{"url": "/health"}]),
                f"bare-{uuid.uuid4().hex[:4]}": whoami(stack, 8001),
            }
            records = [
                await stack.api.submit(conf, repo_dir=stack.repo, run_name=name)
                for name, conf in runs.items()
            ]
            try:
                async with httpx.AsyncClient(timeout=30) as http:
                    for record in records:

                        async def ready(run_id: str = record.id) -> ServiceReplicaRecord | None:
                            replicas = stack.api.store.list_service_replicas([run_id])
                            return next((r for r in replicas if r.state == "ready"), None)

                        replica = await until("the replica to be probed ready", ready, ALLOCATION_WAIT)
                        # Registered at the node's address, which this machine cannot reach, via the backend.
                        node, port = replica.url.removeprefix("http://").rsplit(":", 1)
                        assert node in stack.slurm.node_addresses
                        assert replica.via == f"{stack.api.project}/slurm"
                        assert not reaches(node, int(port))

                        answer = await http.get(
                            f"{url}/proxy/services/{stack.api.project}/{record.run_name}/"
                        )
                        assert (answer.status_code, answer.text) == (200, login)
                        assert answer.text != stack.slurm.address
                        [served] = gateway.directory.table.services[
                            (stack.api.project, record.run_name)
                        ].ready
                        assert served.url.startswith("http://127.0.0.1:")  # the proxy's tunnel

                    # Every request the probed replica got, the worker's probes included: from the login host.
                    answer = await http.get(
                        f"{url}/proxy/services/{stack.api.project}/{records[0].run_name}/peers"
                    )
                    assert answer.text == login
            finally:
                for record in records:
                    await stack.api.stop(record.run_name, abort=True)
                for record in records:
                    await asyncio.wait_for(stack.api.wait(record.run_name), ALLOCATION_WAIT)
            # Their rows gone, the proxy closes their tunnels and the login connection no row needs.
            await until("the proxy's tunnels to close", lambda: not gateway.directory.tunnels.opened(), 30)
    finally:
        stack.slurm.open_nodes()
    # The stack's teardown deletes the fleet and checks that squeue has no job left (wait_no_jobs).
