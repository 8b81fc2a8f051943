"""A real image registry for tests: Debian's `docker-registry` (the distribution registry) on loopback,
behind a TCP relay that can slow its answers down, so that a pull lasts long enough to be watched.

Images are pushed to it with `podman push` from what the tests build locally: nothing leaves the machine.
The podman service of testbed/containers.py trusts it over plain HTTP (its registries.conf names
`REGISTRY`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import socket
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from testbed.containers import PodmanService, free_port, rootfs_tar


@dataclass
class Registry:
    address: str  # host:port, as image names start
    relay: Relay


class Relay:
    """Forwards TCP from `listen` to `target`, at most `rate` bytes per second towards the client."""

    def __init__(self, port: int, target: int) -> None:
        self.port, self.target = port, target
        self.rate: float | None = None  # None: as fast as it goes
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Relay:
        self._thread.start()
        assert self._ready.wait(10), "the relay did not start"
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()

    async def _serve(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        upstream_in, upstream_out = await asyncio.open_connection("127.0.0.1", self.target)
        await asyncio.gather(
            self._copy(client_in, upstream_out, throttled=False),
            self._copy(upstream_in, client_out, throttled=True),
            return_exceptions=True,
        )

    async def _copy(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, throttled: bool) -> None:
        try:
            while chunk := await source.read(16384):
                sink.write(chunk)
                await sink.drain()
                if throttled and self.rate:
                    await asyncio.sleep(len(chunk) / self.rate)
        finally:
            sink.close()


def require_registry() -> str:
    registry = shutil.which("docker-registry")
    assert registry is not None, "docker-registry is missing: scripts/test.sh installs it"
    return registry


@contextlib.contextmanager
def local_registry(workdir: Path, podman: PodmanService) -> Iterator[Registry]:
    """`docker-registry serve` on a free loopback port, reached through a relay at the address the podman
    service trusts."""
    binary = require_registry()
    workdir.mkdir(parents=True, exist_ok=True)
    backend = free_port()
    (workdir / "config.yml").write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {workdir / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{backend}\n"
    )
    with open(workdir / "registry.log", "wb") as log:
        process = subprocess.Popen(
            [binary, "serve", str(workdir / "config.yml")], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        _wait_for_port(backend, process)
        with Relay(podman.registry_port, backend) as relay:
            yield Registry(f"127.0.0.1:{podman.registry_port}", relay)
    finally:
        process.terminate()
        process.wait(10)


def push_fresh_image(podman: PodmanService, registry: Registry, workdir: Path, megabytes: int) -> str:
    """An image with a layer of its own (`megabytes` of random bytes, so no host has it), pushed to the
    registry and removed from the host: a job naming it makes the engine pull every byte. Its name."""
    tag = f"{registry.address}/ferry-test/fresh:{os.urandom(4).hex()}"
    tar = rootfs_tar(workdir / "fresh.tar")
    with tarfile.open(tar, "a") as archive:
        noise = os.urandom(megabytes * 1_000_000)
        info = tarfile.TarInfo("noise.bin")
        info.size = len(noise)
        archive.addfile(info, io.BytesIO(noise))
    env = {**os.environ, **podman.env}
    for command in (
        ["podman", "import", "--change", "ENV PATH=/bin", str(tar), tag],
        ["podman", "push", tag],
        ["podman", "rmi", tag],
    ):
        subprocess.run(command, env=env, check=True, capture_output=True)
    return tag


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, "docker-registry exited: see its registry.log"
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        assert time.monotonic() < deadline, f"docker-registry did not listen on {port}"
        time.sleep(0.05)
