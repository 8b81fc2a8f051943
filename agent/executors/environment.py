"""A job's environment variables: what the task and the spec set, then Ferry's view of the job's cluster;
and the MPI hostfile those variables name."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from agent.records import TaskRecord
from core.wire.agent_api import ClusterInfo, JobSpec

# The job's cluster view, under Ferry's names and dstack's, so that dstack configurations run unchanged.
ENV_PREFIXES = ("FERRY_", "DSTACK_")

# What a job on the host keeps of the agent's environment: what a login gives any process
# (docs/runs.md#the-jobs-environment). Nothing else of the agent's or the worker's reaches a job.
HOST_VARIABLES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "TMPDIR",
        "LD_LIBRARY_PATH",
    }
)


def host_base_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of the agent's own environment that a job on the host starts with."""
    return {
        name: value for name, value in environ.items() if name in HOST_VARIABLES or name.startswith("LC_")
    }


class JobPlaces(NamedTuple):
    """Where the job finds things, as the job sees them (a container's paths differ from the host's)."""

    repo_dir: str  # the code
    working_dir: str  # where its commands start
    mpi_hostfile: str  # every node, with its GPUs as MPI slots (write_mpi_hostfile)
    files: tuple[str, ...] = ()  # each of `files`, in order, where the job finds it (agent/files.py)
    files_dir: str | None = None  # a host process's placed files: `abs/...`, `home/...` (docs/runs.md#files)


def job_environment(
    base: Mapping[str, str], record: TaskRecord, spec: JobSpec, host_has_gpus: bool, places: JobPlaces
) -> dict[str, str]:
    """The job's environment: `base`, the task's, the spec's env and secrets, then Ferry's own."""
    env = {**base, **record.env, **spec.env, **spec.secrets}
    cluster = spec.cluster_info
    gpus_per_node = cluster.gpus_per_node if cluster.gpus_per_node is not None else len(record.gpu_indices)
    values = {
        "RUN_NAME": spec.run_name,
        "REPO_ID": spec.repo_id,
        "REPLICA_NUM": str(spec.replica_num),
        "JOB_NUM": str(spec.job_num),
        "NODE_RANK": str(cluster.node_rank),
        "NODES_NUM": str(cluster.nodes_num),
        "MASTER_NODE_IP": cluster.master_node_ip,
        "NODES_IPS": "\n".join(_node_ips(cluster)),
        "GPUS_PER_NODE": str(gpus_per_node),
        # Node groups may differ in GPUs: the sum of every node's, when the placement says them.
        "GPUS_NUM": str(sum(cluster.node_gpus) if cluster.node_gpus else gpus_per_node * cluster.nodes_num),
        "REPO_DIR": places.repo_dir,
        "WORKING_DIR": places.working_dir,
        "MPI_HOSTFILE": places.mpi_hostfile,
    }
    for prefix in ENV_PREFIXES:
        env.update({prefix + name: value for name, value in values.items()})
    # Ferry's own: dstack places every file where it was asked, so it has no such variables.
    env.update({f"FERRY_FILE_{index}": path for index, path in enumerate(places.files)})
    if places.files_dir is not None:
        env["FERRY_FILES_DIR"] = places.files_dir
    if record.gpu_indices or host_has_gpus:
        # Empty when the task holds no GPU, so that it cannot use another task's.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for index in record.gpu_indices)
    return env


def write_mpi_hostfile(path: Path, cluster: ClusterInfo) -> None:
    """One line per node: its address, and `slots=N` with its GPU count (a node without GPUs gets MPI's
    default, its cores), as dstack writes it."""
    ips = _node_ips(cluster)
    gpus = (
        cluster.node_gpus if len(cluster.node_gpus) == len(ips) else [cluster.gpus_per_node or 0] * len(ips)
    )
    lines = [f"{ip} slots={gpus[k]}" if gpus[k] else ip for k, ip in enumerate(ips)]
    path.write_text("".join(f"{line}\n" for line in lines))


def _node_ips(cluster: ClusterInfo) -> list[str]:
    return cluster.node_ips or [cluster.master_node_ip]
