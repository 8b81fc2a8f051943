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
import socket
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
    env: dict[str, str]  # what `podman` needs to use the same runtime and registries
    registry_port: int  # a test registry there is trusted over plain HTTP (testbed/registry.py)


def require_podman() -> str:
    podman = shutil.which("podman")
    assert podman is not None, "podman is missing: scripts/test.sh installs it"
    assert BUSYBOX.exists(), "busybox-static is missing: scripts/test.sh installs it"
    return podman


def rootfs_tar(path: Path) -> Path:
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
    tar = rootfs_tar(workdir / "rootfs.tar")
    entrypoint = f'ENTRYPOINT ["/bin/sh", "-c", "echo {ENTRYPOINT_WORDS}"]'
    for changes, tag in (([], IMAGE), (["--change", entrypoint], ENTRYPOINT_IMAGE)):
        command = [podman, "import", "--change", "ENV PATH=/bin", *changes, str(tar), tag]
        subprocess.run(command, env=env, check=True, capture_output=True)


# The host's own Python (Debian's), not the test's interpreter: a Python image is made of it.
HOST_PYTHON = Path("/usr/bin/python3")
PYTHON_IMAGES = "localhost/ferry-test/python:{version}"  # what the agent's --python-image is set to


def host_python_version() -> str:
    out = subprocess.run(
        [str(HOST_PYTHON), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _libraries(files: list[Path]) -> set[str]:
    """The shared libraries `files` load, as `ldd` names them (the loader included)."""
    found: set[str] = set()
    for file in files:
        out = subprocess.run(["ldd", str(file)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            path = line.split("=>")[-1].split("(")[0].strip()
            if path.startswith("/"):
                found.add(path)
    return found


def _pythonrootfs_tar(path: Path) -> Path:
    """The busybox root filesystem plus the host's Python: its binary, standard library and libraries."""
    rootfs_tar(path)
    script = "import sys, sysconfig; print(sys.executable); print(sysconfig.get_paths()['stdlib'])"
    out = subprocess.run([str(HOST_PYTHON), "-c", script], capture_output=True, text=True, check=True)
    executable, stdlib = (Path(line) for line in out.stdout.split())
    binary = executable.resolve()
    modules = sorted((stdlib / "lib-dynload").glob("*.so"))
    skipped = {"site-packages", "dist-packages", "test", "__pycache__", "idlelib", "tkinter", "ensurepip"}
    with tarfile.open(path, "a", dereference=True) as tar:
        tar.add(binary, f"usr/bin/{binary.name}")
        info = tarfile.TarInfo("usr/bin/python3")
        info.type, info.linkname = tarfile.SYMTYPE, binary.name
        tar.addfile(info)
        tar.add(stdlib, str(stdlib).lstrip("/"), filter=lambda t: None if Path(t.name).name in skipped else t)
        for library in sorted(_libraries([binary, *modules])):
            tar.add(library, library.lstrip("/"))
    return path


def build_python_image(podman: str, workdir: Path, env: dict[str, str]) -> str:
    """A real Python image of the host's version, tagged as `PYTHON_IMAGES` names it; its tag."""
    tag = PYTHON_IMAGES.format(version=host_python_version())
    tar = _pythonrootfs_tar(workdir / "python-rootfs.tar")
    command = [podman, "import", "--change", "ENV PATH=/usr/bin:/bin", str(tar), tag]
    subprocess.run(command, env=env, check=True, capture_output=True)
    return tag


@contextlib.contextmanager
def podman_service(workdir: Path) -> Iterator[PodmanService]:
    """`podman system service` on a socket under `workdir`, with the test images built; stopped after."""
    podman = require_podman()
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "containers.conf"
    conf.write_text('[engine]\nruntime = "runc"\n')
    registry_port = free_port()
    registries = workdir / "registries.conf"
    registries.write_text(f'[[registry]]\nlocation = "127.0.0.1:{registry_port}"\ninsecure = true\n')
    confs = {"CONTAINERS_CONF": str(conf), "CONTAINERS_REGISTRIES_CONF": str(registries)}
    env = {**os.environ, **confs}
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
        yield PodmanService(url=url, env=confs, registry_port=registry_port)
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        if process.poll() is None:
            process.kill()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def remove_containers(podman: str, label: str, env: dict[str, str]) -> None:
    """Remove whatever containers carry `label` (a test's leftovers), running or not."""
    found = subprocess.run(
        [podman, "ps", "-aq", "--filter", f"label={label}"], env=env, capture_output=True, text=True
    )
    ids = found.stdout.split()
    if ids:
        subprocess.run([podman, "rm", "-f", *ids], env=env, capture_output=True)
