"""The agent's pure parts: nvidia-smi parsing, resource accounting, the job's environment, /proc reading."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agent.executors.environment import JobPlaces, host_base_environment, job_environment, write_mpi_hostfile
from agent.executors.process import is_same_process_alive, process_start_time
from agent.gpus import parse_nvidia_smi
from agent.main import is_loopback
from agent.records import TaskRecord
from agent.resources import InsufficientResources, ResourceLedger
from core.wire.agent_api import ClusterInfo, JobSpec, Resources, TaskStatus

PLACES = JobPlaces(repo_dir="/code", working_dir="/code/sub", mpi_hostfile="/task/mpi_hostfile")


def test_nvidia_smi_lines_are_parsed_even_with_commas_in_names() -> None:
    output = "1, Tesla T4, 15360\n0, NVIDIA H100 80GB HBM3, Rev. A, 81559\n\n"
    gpus = parse_nvidia_smi(output)
    assert [(gpu.index, gpu.name, gpu.memory_mib) for gpu in gpus] == [
        (0, "NVIDIA H100 80GB HBM3, Rev. A", 81559),
        (1, "Tesla T4", 15360),
    ]


def test_fractional_cpus_add_up_without_drift() -> None:
    ledger = ResourceLedger.for_host(cpus=1, memory_bytes=2**30, gpu_indices=[])
    for holder in range(10):
        ledger.allocate(f"t{holder}", Resources(cpu=0.1, memory=0.1))
    assert ledger.free().cpu == 0
    with pytest.raises(InsufficientResources, match="CPU: requested 0.1, free 0"):
        ledger.allocate("one-more", Resources(cpu=0.1))
    ledger.release("t3")
    ledger.allocate("one-more", Resources(cpu=0.1))


def test_gpu_indices_are_handed_out_once_and_restored_as_granted() -> None:
    ledger = ResourceLedger.for_host(cpus=8, memory_bytes=2**34, gpu_indices=[3, 1, 0, 2])
    assert ledger.allocate("a", Resources(gpu=3)) == [0, 1, 2]
    assert ledger.allocate("a", Resources(gpu=3)) == [0, 1, 2]  # the same holder again: the same share
    with pytest.raises(InsufficientResources, match="GPU: requested 2, free 1 of 4"):
        ledger.allocate("b", Resources(gpu=2))
    restarted = ResourceLedger.for_host(cpus=8, memory_bytes=2**34, gpu_indices=[0, 1, 2, 3])
    restarted.restore("a", Resources(gpu=2), [1, 3])
    assert restarted.free_gpu_indices() == [0, 2]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("localhost", True), ("0.0.0.0", False)]
    + [("10.0.0.1", False), ("::", False), ("agent.example.com", False)],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_ferry_variables_and_gpus_cannot_be_overridden_by_the_job() -> None:
    record = TaskRecord(
        id="t",
        name="",
        status=TaskStatus.PENDING,
        resources=Resources(gpu=2),
        gpu_indices=[2, 3],
        ports=[],
        volumes=[],
        env={"FROM_TASK": "task", "SHARED": "task"},
        created_at=0,
    )
    spec = JobSpec(
        run_name="run",
        commands=["true"],
        env={"SHARED": "spec", "FERRY_RUN_NAME": "spoofed", "CUDA_VISIBLE_DEVICES": "0,1"},
        secrets={"TOKEN": "secret"},
        cluster_info=ClusterInfo(nodes_num=2),
    )
    env = job_environment({"PATH": "/bin", "SHARED": "base"}, record, spec, True, PLACES)
    assert env["PATH"] == "/bin"
    assert env["FROM_TASK"] == "task"
    assert env["SHARED"] == "spec"
    assert env["TOKEN"] == "secret"
    assert env["FERRY_RUN_NAME"] == env["DSTACK_RUN_NAME"] == "run"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["FERRY_GPUS_PER_NODE"] == "2"
    assert env["FERRY_GPUS_NUM"] == env["DSTACK_GPUS_NUM"] == "4"


def test_a_job_on_the_host_keeps_only_a_login_environment_of_the_agents() -> None:
    agent_environ = {
        "PATH": "/usr/bin:/bin", "HOME": "/home/me", "LANG": "C.UTF-8", "LC_TIME": "C", "TZ": "UTC",
        "FERRY_HOME": "/home/me/.ferry", "FERRY_AGENT_TOKEN": "t", "VIRTUAL_ENV": "/x/.venv",
        "PYTHONPATH": "/x", "DSTACK_SERVER": "s", "AWS_SECRET_ACCESS_KEY": "k",
    }  # fmt: skip
    assert host_base_environment(agent_environ) == {
        "PATH": "/usr/bin:/bin", "HOME": "/home/me", "LANG": "C.UTF-8", "LC_TIME": "C", "TZ": "UTC",
    }  # fmt: skip


def test_no_cuda_visible_devices_on_a_host_without_gpus() -> None:
    record = TaskRecord(
        id="t",
        name="",
        status=TaskStatus.PENDING,
        resources=Resources(),
        gpu_indices=[],
        ports=[],
        volumes=[],
        env={},
        created_at=0,
    )
    env = job_environment({}, record, JobSpec(run_name="r", commands=["true"]), False, PLACES)
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_node_groups_gpus_and_the_mpi_hostfile(tmp_path: Path) -> None:
    """Node groups differ in GPUs: GPUS_NUM sums each node's, the hostfile gives each its slots (a node
    without GPUs: MPI's default); the places the job is told are its twins' too."""
    record = TaskRecord(
        id="t", name="", status=TaskStatus.PENDING, resources=Resources(gpu=4), gpu_indices=[0, 1, 2, 3],
        ports=[], volumes=[], env={}, created_at=0,
    )  # fmt: skip
    cluster = ClusterInfo(
        node_rank=1, nodes_num=3, master_node_ip="10.0.0.1", node_ips=["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        gpus_per_node=4, node_gpus=[0, 4, 4],
    )  # fmt: skip
    env = job_environment(
        {}, record, JobSpec(run_name="r", commands=["true"], cluster_info=cluster), False, PLACES
    )
    assert env["DSTACK_GPUS_NUM"] == env["FERRY_GPUS_NUM"] == "8"
    assert env["DSTACK_GPUS_PER_NODE"] == "4"
    assert [env[f"DSTACK_{name}"] for name in ("REPO_DIR", "WORKING_DIR", "MPI_HOSTFILE")] == list(PLACES[:3])
    hostfile = tmp_path / "hostfile"
    write_mpi_hostfile(hostfile, cluster)
    assert hostfile.read_text() == "10.0.0.1\n10.0.0.2 slots=4\n10.0.0.3 slots=4\n"
    write_mpi_hostfile(hostfile, ClusterInfo(gpus_per_node=2))  # one node, no list from its placement
    assert hostfile.read_text() == "127.0.0.1 slots=2\n"


def test_process_identity_uses_the_start_time(tmp_path: Path) -> None:
    me = os.getpid()
    started = process_start_time(me)
    assert started is not None
    assert is_same_process_alive(me, started)
    assert not is_same_process_alive(me, started + 1)  # same pid, another process
    assert not is_same_process_alive(me, None)
    child = subprocess.Popen(["true"])
    child_started = process_start_time(child.pid)
    child.wait()
    assert child_started is not None
    assert not is_same_process_alive(child.pid, child_started)
