"""The container's create request, decided without an engine (agent/containers/config.py): GPUs from a
fake device list, networks and ports, the entrypoint, mounts, limits."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

import pytest

from agent.containers.config import (
    ContainerConfigError,
    EngineTraits,
    create_request,
    gpu_devices,
    host_ulimits,
)
from agent.executors.container import ran_despite_error
from agent.records import TaskPaths, TaskRecord
from core.wire.agent_api import ContainerSpec, JobSpec, Resources, VolumeMount

PODMAN_CDI = EngineTraits(kind="podman", cdi_gpus=True)
DOCKER = EngineTraits(kind="docker", cdi_gpus=False)


def record(**fields: Any) -> TaskRecord:
    values: dict[str, Any] = {
        "id": "t-1",
        "name": "",
        "status": "pending",
        "resources": Resources(),
        "gpu_indices": [],
        "ports": [],
        "volumes": [],
        "env": {},
        "created_at": 0.0,
        "container": ContainerSpec(image="busybox"),
    }
    return TaskRecord(**{**values, **fields})


def request(
    task: TaskRecord, spec: JobSpec | None = None, traits: EngineTraits = PODMAN_CDI
) -> dict[str, Any]:
    spec = spec or JobSpec(run_name="r", commands=["echo hi"], shell="sh")
    paths = TaskPaths(Path("/data/tasks/t-1"))
    assert task.container is not None
    return create_request(
        record=task,
        spec=spec,
        paths=paths,
        env={"A": "1"},
        traits=traits,
        key="k",
        ulimits=[],
        image=task.container.image,
    )


def test_only_the_allocated_gpus_of_a_fake_device_list_are_passed() -> None:
    # A host of four GPUs (0..3): the task holds 1 and 3, and only those reach its container.
    assert gpu_devices(PODMAN_CDI, [1, 3]) == {"devices": ["nvidia.com/gpu=1", "nvidia.com/gpu=3"]}
    docker = gpu_devices(DOCKER, [1, 3])["device_requests"][0]
    assert docker["Driver"] == "nvidia" and docker["DeviceIDs"] == ["1", "3"]
    assert docker["Capabilities"] == [["gpu"]]
    assert gpu_devices(DOCKER, []) == {}
    devices = request(record(gpu_indices=[2]))["HostConfig"]["Devices"]
    assert [d["PathOnHost"] for d in devices] == ["nvidia.com/gpu=2"]


def test_podman_without_cdi_refuses_gpus_with_the_way_out() -> None:
    with pytest.raises(ContainerConfigError, match="nvidia-ctk cdi generate"):
        gpu_devices(EngineTraits(kind="podman", cdi_gpus=False), [0])


def test_the_bridge_publishes_each_port_on_an_ephemeral_loopback_port() -> None:
    body = request(record(ports=[8080, 9000], network="bridge"))
    host = body["HostConfig"]
    assert host["NetworkMode"] == "bridge"
    assert host["PortBindings"] == {
        "8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}],
        "9000/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}],
    }
    assert set(body["ExposedPorts"]) == {"8080/tcp", "9000/tcp"}
    on_host = request(record(ports=[8080], network="host"))["HostConfig"]
    assert on_host["NetworkMode"] == "host" and "PortBindings" not in on_host
    # On an SSH host: the host's address, which the proxy reaches (core.jobs.transitions.publish_address).
    remote = record(
        ports=[8080], network="bridge", container=ContainerSpec(image="b", publish_address="10.0.0.7")
    )
    assert request(remote)["HostConfig"]["PortBindings"] == {
        "8080/tcp": [{"HostIp": "10.0.0.7", "HostPort": ""}]
    }


def test_commands_run_as_a_script_and_without_them_the_entrypoint() -> None:
    body = request(record())
    assert body["Entrypoint"] == ["sh"] and body["Cmd"] == ["-e", "/.ferry/job.sh"]
    assert "/data/tasks/t-1/job.sh:/.ferry/job.sh:ro" in body["HostConfig"]["Binds"]
    no_commands = JobSpec(run_name="r", commands=[])
    own = request(record(), no_commands)
    assert own.get("Entrypoint") is None and own.get("Cmd") is None  # the image's own
    given = request(record(container=ContainerSpec(image="x", entrypoint=["/start", "--fast"])), no_commands)
    assert given["Entrypoint"] == ["/start", "--fast"]


def test_mounts_workdir_limits_and_settings() -> None:
    task = record(
        resources=Resources(cpu=1.5, memory=2),
        volumes=[
            VolumeMount(host_path="/srv/data", path="/data"),
            VolumeMount(host_path="/srv/c", path="cache"),
        ],
        container=ContainerSpec(image="x", user="1000:1000", privileged=True, shm_size=2**30),
    )
    body = request(task, JobSpec(run_name="r", commands=["true"], working_dir="src"))
    host = body["HostConfig"]
    assert host["Binds"][0] == "/data/tasks/t-1/workdir:/workflow:rw"
    assert "/srv/data:/data:rw" in host["Binds"] and "/srv/c:/workflow/cache:rw" in host["Binds"]
    assert body["WorkingDir"] == "/workflow/src" and body["User"] == "1000:1000"
    assert host["Privileged"] is True and host["ShmSize"] == 2**30
    assert host["NanoCpus"] == 1_500_000_000 and host["Memory"] == 2 * 2**30
    assert body["Labels"] == {"ferry.task": "t-1", "ferry.agent": "k"}
    assert body["Env"] == ["A=1"]


def test_ulimits_stay_within_the_agent_s_own() -> None:
    limits = {limit["Name"]: limit for limit in host_ulimits()}
    nofile_soft, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if nofile_hard != resource.RLIM_INFINITY:
        assert limits["nofile"]["Hard"] == nofile_hard and limits["nofile"]["Soft"] <= nofile_hard
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert limits["nproc"]["Soft"] <= limits["nproc"]["Hard"] <= pid_max


def test_a_start_answered_with_an_error_counts_as_run_only_if_the_container_ran() -> None:
    """Podman 4.3 can fail the start of a container whose quick command ended at once (it reads the
    process's cgroup after it is gone); the container's state, as Podman's inspection says it, decides."""
    never = "0001-01-01T00:00:00Z"
    # As Podman left a container whose command was not found (runc create failed): never started.
    assert not ran_despite_error({"State": {"Status": "created", "StartedAt": never, "Pid": 0}})
    # Its process ran and ended before Podman read its cgroup.
    assert ran_despite_error({"State": {"Status": "exited", "StartedAt": never, "ExitCode": 0}})
    assert ran_despite_error({"State": {"Status": "exited", "StartedAt": "2026-12-01T03:21:50.7Z"}})
    assert ran_despite_error({"State": {"Status": "running", "StartedAt": "2026-12-01T03:21:50.7Z"}})
    assert not ran_despite_error({})
