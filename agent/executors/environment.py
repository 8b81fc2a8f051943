"""A job's environment variables: what the task and the spec set, then Ferry's view of the job's cluster."""

from __future__ import annotations

from collections.abc import Mapping

from agent.records import TaskRecord
from core.wire.agent_api import JobSpec

# The job's cluster view, under Ferry's names and dstack's, so that dstack configurations run unchanged.
ENV_PREFIXES = ("FERRY_", "DSTACK_")


def job_environment(
    base: Mapping[str, str], record: TaskRecord, spec: JobSpec, host_has_gpus: bool
) -> dict[str, str]:
    """The job's environment: `base`, the task's, the spec's env and secrets, then Ferry's own."""
    env = {**base, **record.env, **spec.env, **spec.secrets}
    cluster = spec.cluster_info
    gpus_per_node = cluster.gpus_per_node if cluster.gpus_per_node is not None else len(record.gpu_indices)
    node_ips = cluster.node_ips or [cluster.master_node_ip]
    values = {
        "RUN_NAME": spec.run_name,
        "REPLICA_NUM": str(spec.replica_num),
        "JOB_NUM": str(spec.job_num),
        "NODE_RANK": str(cluster.node_rank),
        "NODES_NUM": str(cluster.nodes_num),
        "MASTER_NODE_IP": cluster.master_node_ip,
        "NODES_IPS": "\n".join(node_ips),
        "GPUS_PER_NODE": str(gpus_per_node),
        "GPUS_NUM": str(gpus_per_node * cluster.nodes_num),
    }
    for prefix in ENV_PREFIXES:
        env.update({prefix + name: value for name, value in values.items()})
    if record.gpu_indices or host_has_gpus:
        # Empty when the task holds no GPU, so that it cannot use another task's.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for index in record.gpu_indices)
    return env
