"""From a run configuration to its jobs: how many replicas and nodes, and what each job runs.

Each answer is the run type's (core.run_types); these functions are what workflows and submissions call.
"""

from __future__ import annotations

from core.configuration import RunConfiguration
from core.run_types import UNLIMITED_GRACE, configurator_for
from core.wire.agent_api import JobSpec, Resources

__all__ = ["UNLIMITED_GRACE", "job_commands", "job_resources", "job_spec", "nodes_count", "replica_count"]


def replica_count(configuration: RunConfiguration) -> int:
    """Replicas a run starts with: a service's lower bound (at least one), one otherwise."""
    return configurator_for(configuration).replica_count()


def nodes_count(configuration: RunConfiguration) -> int:
    """Jobs per replica: a multi-node task has one per node."""
    return configurator_for(configuration).nodes_per_replica()


def job_commands(configuration: RunConfiguration) -> list[str]:
    return configurator_for(configuration).commands()


def job_resources(configuration: RunConfiguration) -> Resources:
    """What each job reserves on its instance: the lower bound of every requested range."""
    return configurator_for(configuration).resources()


def job_spec(configuration: RunConfiguration, *, run_name: str, replica_num: int, job_num: int) -> JobSpec:
    """What the agent runs for one job; its cluster info is filled in once the job is placed."""
    return configurator_for(configuration).job_spec(
        run_name=run_name, replica_num=replica_num, job_num=job_num
    )
