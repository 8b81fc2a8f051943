"""The host's container engine, reached through the Docker Engine API (docs/containers.md).

Docker and Podman both serve that API on a Unix socket, so the agent takes whichever it finds: the one
`--container-engine` names, else `DOCKER_HOST`, else Docker's or Podman's usual socket. A host with
Podman but no socket served gets one: the agent starts `podman system service` on a socket in its data
dir, and stops it when it exits (containers outlive it: each has its own monitor, conmon).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.errors import DockerException
from requests.exceptions import RequestException

from core.wire.agent_api import PYTHON_IMAGE

logger = logging.getLogger(__name__)

API_VERSION = "1.41"  # Docker 20.10 and Podman 4 both serve it
USUAL_SOCKETS = ("/var/run/docker.sock", "/run/podman/podman.sock")
_SERVICE_START_TIMEOUT = 15.0
_API_TIMEOUT = 60  # seconds for one call; a pull streams, and each read may take this long


class EngineError(OSError):
    """The engine refused or failed a request; the message says why, in its words."""


@dataclass
class Engine:
    api: docker.APIClient
    kind: str  # "docker" or "podman"
    version: str
    url: str
    service_pid: int | None = field(default=None, repr=False)  # the podman service the agent serves

    @property
    def name(self) -> str:
        return f"{self.kind} {self.version}"

    def streaming_client(self) -> docker.APIClient:
        """A client of its own for one long stream (a container's output), which may be quiet for hours:
        no read timeout, and no connection taken from the shared client's pool."""
        return docker.APIClient(base_url=self.url, version=API_VERSION, timeout=None)

    def close(self) -> None:
        self.api.close()
        if self.service_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.service_pid, signal.SIGTERM)


def _connect(url: str) -> Engine | None:
    try:
        api = docker.APIClient(base_url=url, version=API_VERSION, timeout=_API_TIMEOUT)
        info = api.version()
    except (DockerException, RequestException, OSError) as exc:
        logger.debug("no container engine at %s: %s", url, exc)
        return None
    components = [str(c.get("Name", "")) for c in info.get("Components") or []]
    kind = "podman" if any("podman" in name.lower() for name in components) else "docker"
    return Engine(api=api, kind=kind, version=str(info.get("Version", "?")), url=url)


def _candidates(explicit: str | None) -> list[str]:
    if explicit:
        return [explicit]
    urls = []
    if os.environ.get("DOCKER_HOST"):
        urls.append(os.environ["DOCKER_HOST"])
    sockets = list(USUAL_SOCKETS)
    if os.environ.get("XDG_RUNTIME_DIR"):
        sockets.append(os.path.join(os.environ["XDG_RUNTIME_DIR"], "podman", "podman.sock"))
    urls += [f"unix://{path}" for path in sockets if Path(path).is_socket()]
    return urls


def _our_service(data_dir: Path, socket: Path) -> Engine | None:
    """The podman service an earlier agent of this data dir started and left running (it was killed)."""
    try:
        pid = int((data_dir / "podman-service.pid").read_text())
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            serving = str(socket).encode() in cmdline.read()
    except (OSError, ValueError):
        return None
    engine = _connect(f"unix://{socket}") if serving else None
    if engine is not None:
        engine.service_pid = pid
    return engine


def _serve_podman(data_dir: Path) -> Engine | None:
    podman = shutil.which("podman")
    if podman is None:
        return None
    socket = data_dir / "podman.sock"
    adopted = _our_service(data_dir, socket)
    if adopted is not None:
        return adopted
    socket.unlink(missing_ok=True)
    url = f"unix://{socket}"
    log = open(data_dir / "podman-service.log", "ab")  # noqa: SIM115 - the service's own, kept open by it
    service = subprocess.Popen(
        [podman, "system", "service", "--time=0", url],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,  # a Ctrl-C meant for the agent is not the service's
    )
    log.close()
    (data_dir / "podman-service.pid").write_text(str(service.pid))
    deadline = time.monotonic() + _SERVICE_START_TIMEOUT
    while time.monotonic() < deadline and service.poll() is None:
        if socket.is_socket():
            engine = _connect(url)
            if engine is not None:
                engine.service_pid = service.pid
                return engine
        time.sleep(0.05)
    logger.warning("podman system service did not come up: see %s", data_dir / "podman-service.log")
    service.kill()
    service.wait()
    return None


class EngineFinder:
    """The engine the agent's container jobs use. A served socket is found at the agent's start; a podman
    service of the agent's own is started only for its first container job, so that an agent that never
    runs one never starts it. `python_image` is the image template of a job's `python` on this host."""

    def __init__(self, data_dir: Path, explicit: str | None = None, python_image: str = PYTHON_IMAGE) -> None:
        self._data_dir = data_dir
        self._explicit = explicit
        self.python_image = python_image
        self._lock = threading.Lock()
        self._looked = False
        self.engine: Engine | None = None
        for url in _candidates(explicit):
            self.engine = _connect(url)
            if self.engine is not None:
                self._looked = True
                break
        if explicit and self.engine is None:
            logger.warning("no container engine answers at %s", explicit)
            self._looked = True

    @property
    def name(self) -> str | None:
        """What `InstanceInfo.container_engine` says: the engine, or podman before its first use."""
        if self.engine is not None:
            return self.engine.name
        if not self._looked and shutil.which("podman") is not None:
            return "podman (served from the first container job)"
        return None

    def get(self) -> Engine | None:
        """Blocking: the engine, served now if it has to be; None when the host has none."""
        with self._lock:
            if not self._looked:
                self._looked = True
                self.engine = _serve_podman(self._data_dir)
            return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
