"""What a container job's container is made of: the Docker Engine API's create request, decided from the
task's record and job spec alone (no engine call here), so that every rule is testable without one.

Layout in the container (docs/containers.md): the task's workdir (the code) at /workflow, where the job
starts unless `working_dir` says otherwise; the job's commands as a script at /.ferry/job.sh, run by the
job's shell; each volume at its path (a relative one under /workflow); each of `files` placed outside the
code at its path (agent/files.py).
"""

from __future__ import annotations

import hashlib
import posixpath
import resource
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker.types import ContainerConfig, DeviceRequest, HostConfig, Ulimit

from agent.records import TaskPaths, TaskRecord
from core.wire.agent_api import BYTES_PER_GB, JobSpec

API_VERSION = "1.41"
WORKFLOW_DIR = "/workflow"
SCRIPT_PATH = "/.ferry/job.sh"
MPI_HOSTFILE_PATH = "/.ferry/mpi_hostfile"
TASK_LABEL = "ferry.task"
AGENT_LABEL = "ferry.agent"
PID_MAX = Path("/proc/sys/kernel/pid_max")


class ContainerConfigError(ValueError):
    """The job cannot be run as asked on this host (e.g. GPUs with no way to pass them)."""


@dataclass(frozen=True)
class EngineTraits:
    kind: str  # "docker" or "podman"
    cdi_gpus: bool  # a CDI spec names the host's NVIDIA GPUs (nvidia.com/gpu=N)


def agent_key(data_dir: Path) -> str:
    """Tells one agent's containers from another's on a shared engine (tests run several per machine)."""
    return hashlib.sha256(str(data_dir).encode()).hexdigest()[:10]


def container_name(key: str, task_id: str) -> str:
    return f"ferry-{key}-{task_id}"


def container_dir(spec: JobSpec) -> str:
    """Where the job starts in its container."""
    if spec.working_dir is None:
        return WORKFLOW_DIR
    return posixpath.normpath(posixpath.join(WORKFLOW_DIR, spec.working_dir))


def mount_path(path: str) -> str:
    return posixpath.normpath(posixpath.join(WORKFLOW_DIR, path))


def host_ulimits() -> list[Ulimit]:
    """The agent's own open-file and process limits, never above what the host allows: an engine's
    defaults may be higher, and raising a limit in a container the host caps fails the start
    (`setrlimit ... Operation not permitted`). RLIMIT_NPROC above pid_max is refused the same way."""
    nofile_soft, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc_soft, nproc_hard = resource.getrlimit(resource.RLIMIT_NPROC)
    try:
        pid_max = int(PID_MAX.read_text())
    except (OSError, ValueError):
        pid_max = 32768
    nproc_hard = pid_max if nproc_hard == resource.RLIM_INFINITY else min(nproc_hard, pid_max)
    nproc_soft = nproc_hard if nproc_soft == resource.RLIM_INFINITY else min(nproc_soft, nproc_hard)
    limits = [Ulimit(name="nproc", soft=nproc_soft, hard=nproc_hard)]
    if nofile_hard != resource.RLIM_INFINITY:
        limits.append(Ulimit(name="nofile", soft=min(nofile_soft, nofile_hard), hard=nofile_hard))
    return limits


def gpu_devices(traits: EngineTraits, indices: list[int]) -> dict[str, Any]:
    """The host config that passes the job's GPUs, and only those, into its container."""
    if not indices:
        return {}
    if traits.cdi_gpus:
        return {"devices": [f"nvidia.com/gpu={index}" for index in indices]}
    if traits.kind == "docker":
        ids = [str(index) for index in indices]
        return {"device_requests": [DeviceRequest(driver="nvidia", device_ids=ids, capabilities=[["gpu"]])]}
    raise ContainerConfigError(
        "the job holds GPUs but podman has no CDI spec for them: generate one with "
        "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (NVIDIA Container Toolkit)"
    )


def create_request(
    *,
    record: TaskRecord,
    spec: JobSpec,
    paths: TaskPaths,
    env: dict[str, str],
    traits: EngineTraits,
    key: str,
    ulimits: list[Ulimit],
    image: str,
    file_binds: Sequence[str] = (),
) -> dict[str, Any]:
    """The body of `POST /containers/create` for the task's job, which runs in `image`; `file_binds`
    place the `files` outside the code at their paths (agent/files.py)."""
    container = record.container
    assert container is not None
    binds = [f"{paths.workdir}:{WORKFLOW_DIR}:rw"]
    if spec.commands:
        binds.append(f"{paths.script}:{SCRIPT_PATH}:ro")
    if paths.mpi_hostfile.exists():
        binds.append(f"{paths.mpi_hostfile}:{MPI_HOSTFILE_PATH}:ro")
    binds += [f"{volume.host_path}:{mount_path(volume.path)}:rw" for volume in record.volumes]
    binds += file_binds
    host: dict[str, Any] = {
        "binds": binds,
        "privileged": container.privileged,
        "ulimits": ulimits,
        **gpu_devices(traits, record.gpu_indices),
    }
    if container.shm_size is not None:
        host["shm_size"] = container.shm_size
    if record.resources.cpu > 0:
        host["nano_cpus"] = int(record.resources.cpu * 1e9)
    if record.resources.memory > 0:
        host["mem_limit"] = int(record.resources.memory * BYTES_PER_GB)
    ports = list(record.ports)  # TCP
    if record.network == "host":
        host["network_mode"] = "host"
    else:
        # Published on ephemeral ports of the address the proxy reaches: this machine's loopback for the
        # local instance, an SSH host's own address (docs/containers.md#networks).
        host["network_mode"] = "bridge"
        host["port_bindings"] = {port: (container.publish_address,) for port in ports}
    if spec.commands:
        entrypoint: list[str] | None = [spec.shell]
        command: list[str] | None = ["-e", SCRIPT_PATH]
    else:
        entrypoint, command = container.entrypoint, None  # None: the image's own
    config = ContainerConfig(
        API_VERSION,
        image,
        command,
        environment=env,
        working_dir=container_dir(spec),
        user=container.user,
        entrypoint=entrypoint,
        labels={TASK_LABEL: record.id, AGENT_LABEL: key},
        ports=ports or None,
        host_config=HostConfig(API_VERSION, **host),
    )
    return dict(config)
