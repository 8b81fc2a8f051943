"""From a run configuration to its jobs: how many replicas and nodes, and what each job runs."""

from __future__ import annotations

from core.configuration import (
    DevEnvironmentConfiguration,
    RunConfiguration,
    ServiceConfiguration,
    TaskConfiguration,
)
from core.configuration.resources import allocation
from core.wire.agent_api import JobSpec, Resources

# A dev environment runs its `init` commands, then stays up until it is stopped (or its duration ends).
_DEV_ENVIRONMENT_KEEPALIVE = "sleep infinity"


def replica_count(configuration: RunConfiguration) -> int:
    """Replicas a run starts with: a service's lower bound (at least one), one otherwise."""
    if isinstance(configuration, ServiceConfiguration):
        return max(configuration.replicas.min or 0, 1)
    return 1


def nodes_count(configuration: RunConfiguration) -> int:
    """Jobs per replica: a multi-node task has one per node."""
    return configuration.nodes if isinstance(configuration, TaskConfiguration) else 1


def job_commands(configuration: RunConfiguration) -> list[str]:
    if isinstance(configuration, DevEnvironmentConfiguration):
        return [*configuration.init, _DEV_ENVIRONMENT_KEEPALIVE]
    return list(configuration.commands)


def job_resources(configuration: RunConfiguration) -> Resources:
    """What each job reserves on its instance: the lower bound of every requested range."""
    wanted = allocation(configuration.resources)
    return Resources(cpu=wanted.cpu, memory=wanted.memory_gb, gpu=wanted.gpu_count)


def job_spec(configuration: RunConfiguration, *, run_name: str, replica_num: int, job_num: int) -> JobSpec:
    """What the agent runs for one job; its cluster info is filled in once the job is placed."""
    return JobSpec(
        run_name=run_name,
        replica_num=replica_num,
        job_num=job_num,
        commands=job_commands(configuration),
        env={k: v for k, v in configuration.env.items() if v is not None},
        working_dir=configuration.working_dir,
        shell=configuration.shell or "bash",
        max_duration=configuration.max_duration,
        stop_duration=_grace_seconds(configuration.stop_duration),
    )


# `stop_duration: off` means no limit on a graceful stop; the agent still needs a number of seconds.
UNLIMITED_GRACE = 365 * 86400


def _grace_seconds(stop_duration: int | None) -> int:
    return UNLIMITED_GRACE if stop_duration is None else stop_duration
