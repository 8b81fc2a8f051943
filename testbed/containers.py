"""A real container engine for tests: Podman's Docker-compatible API on a socket of the test's own, and
test images built here from Debian's busybox-static (no registry is reached, docs/containers.md#tests).

Podman 4.3 on these machines runs containers only with the `runc` runtime, so the service is given a
containers.conf that names it; the agent itself passes ulimits within the host's (agent/containers/config.py).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
IMAGE = "localhost/ferry-test/busybox:1"  # busybox as sh, sleep, nc, httpd...: no entrypoint
ENTRYPOINT_IMAGE = "localhost/ferry-test/entrypoint:1"  # the same, whose entrypoint says hello
ENTRYPOINT_WORDS = "hello from the entrypoint of the image"
_APPLETS = ("sh", "sleep", "echo", "cat", "ls", "pwd", "env", "id", "nc", "httpd", "touch", "kill", "mkdir")


@dataclass(frozen=True)
class PodmanService:
    url: str
    env: dict[str, str]  # what `podman` needs to use the same runtime (CONTAINERS_CONF)


def require_podman() -> str:
    podman = shutil.which("podman")
    assert podman is not None, "podman is missing: scripts/test.sh installs it"
    assert BUSYBOX.exists(), "busybox-static is missing: scripts/test.sh installs it"
    return podman


def _rootfs_tar(path: Path) -> Path:
    """A root filesystem of one static busybox and its applets' links."""
    with tarfile.open(path, "w") as tar:
        for directory in ("bin", "tmp", "etc", "workflow"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        tar.add(BUSYBOX, "bin/busybox")
        for applet in _APPLETS:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
        passwd = b"root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/tmp:/bin/sh\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))
    return path


def build_images(podman: str, workdir: Path, env: dict[str, str]) -> None:
    """Import the test images from a root filesystem made here (idempotent: the same tags replaced)."""
    tar = _rootfs_tar(workdir / "rootfs.tar")
    entrypoint = f'ENTRYPOINT ["/bin/sh", "-c", "echo {ENTRYPOINT_WORDS}"]'
    for changes, tag in (([], IMAGE), (["--change", entrypoint], ENTRYPOINT_IMAGE)):
        command = [podman, "import", "--change", "ENV PATH=/bin", *changes, str(tar), tag]
        subprocess.run(command, env=env, check=True, capture_output=True)


@contextlib.contextmanager
def podman_service(workdir: Path) -> Iterator[PodmanService]:
    """`podman system service` on a socket under `workdir`, with the test images built; stopped after."""
    podman = require_podman()
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "containers.conf"
    conf.write_text('[engine]\nruntime = "runc"\n')
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    build_images(podman, workdir, env)
    socket = workdir / "podman.sock"
    url = f"unix://{socket}"
    with open(workdir / "podman-service.log", "wb") as log:
        process = subprocess.Popen(
            [podman, "system", "service", "--time=0", url],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while not socket.is_socket():
            assert process.poll() is None, (workdir / "podman-service.log").read_text()
            assert time.monotonic() < deadline, "podman system service did not make its socket"
            time.sleep(0.05)
        yield PodmanService(url=url, env={"CONTAINERS_CONF": str(conf)})
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        if process.poll() is None:
            process.kill()


def remove_containers(podman: str, label: str, env: dict[str, str]) -> None:
    """Remove whatever containers carry `label` (a test's leftovers), running or not."""
    found = subprocess.run(
        [podman, "ps", "-aq", "--filter", f"label={label}"], env=env, capture_output=True, text=True
    )
    ids = found.stdout.split()
    if ids:
        subprocess.run([podman, "rm", "-f", *ids], env=env, capture_output=True)
