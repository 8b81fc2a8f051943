"""What a run type decides for its jobs: how many, what each runs, with what env and resources.

One configurator per run type (task, service, dev environment) turns its configuration into jobs. What is
the same for every type lives here; what a type decides on its own is an abstract method. Later job
fields a type decides (probes, image, volumes, SSH) belong here too.
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from typing import Generic, TypeVar

from core.configuration import BaseRunConfiguration
from core.configuration.code_sources import archive_path, cloned_repos, single_branch
from core.configuration.resources import allocation
from core.wire.agent_api import (
    BYTES_PER_GB,
    ContainerSpec,
    JobSpec,
    RegistryCredentials,
    Resources,
    python_image,
)
from core.wire.repo_clone import RepoClone
from core.wire.services import ServiceJob

# `stop_duration: off` means no limit on a graceful stop; the agent still needs a number of seconds.
UNLIMITED_GRACE = 365 * 86400

ConfigurationT = TypeVar("ConfigurationT", bound=BaseRunConfiguration)


class RunConfigurator(ABC, Generic[ConfigurationT]):
    def __init__(self, configuration: ConfigurationT) -> None:
        self.configuration = configuration

    @abstractmethod
    def replica_count(self) -> int:
        """Replicas the run starts with."""

    @abstractmethod
    def nodes_per_replica(self) -> int:
        """Jobs per replica, one per node."""

    @abstractmethod
    def commands(self) -> list[str]:
        """What each job runs, one shell line each."""

    def for_group(self, group: str | None) -> RunConfigurator[ConfigurationT]:
        """The configurator of a replica group's jobs; only a service has replica groups."""
        return self

    def for_node(self, job_num: int) -> RunConfigurator[ConfigurationT]:
        """The configurator of one node's job: its node group's commands, resources and ports when a
        task has node groups; only a task has them."""
        return self

    def node_groups(self) -> list[int]:
        """The node count of each node group, in order ([] without groups): node j of group i is the
        replica's job `sum(groups[:i]) + j`, whose address `${{ groups[i].nodes[j].IP_ADDRESS }}` names."""
        return []

    def service_job(self) -> ServiceJob | None:
        """What a service replica's job knows of serving; None for the other run types."""
        return None

    def env(self) -> dict[str, str]:
        # A bare `NAME` (no value) is resolved at apply time; one still unresolved is left out.
        return {key: value for key, value in self.configuration.env.items() if value is not None}

    def resources(self) -> Resources:
        """What each job reserves on its instance: the lower bound of every requested range."""
        wanted = allocation(self.configuration.resources)
        return Resources(cpu=wanted.cpu, memory=wanted.memory_gb, gpu=wanted.gpu_count)

    def job_spec(self, *, run_name: str, replica_num: int, job_num: int, repo_id: str = "") -> JobSpec:
        """What the agent runs for one job; its cluster info is filled in once the job is placed."""
        configuration = self.configuration
        return JobSpec(
            run_name=run_name,
            replica_num=replica_num,
            job_num=job_num,
            repo_id=repo_id,
            commands=self.commands(),
            env=self.env(),
            working_dir=configuration.working_dir,
            # dstack's default: bash on the host, sh in a container (every image has one).
            shell=configuration.shell or ("sh" if self.image() is not None else "bash"),
            max_duration=configuration.max_duration,
            stop_duration=_agent_grace(configuration.stop_duration),
            inactivity_duration=self.inactivity_duration(),
            repos=self.cloned_repos(),
        )

    def cloned_repos(self) -> list[RepoClone]:
        """The `repos` by url, as the agent clones them (docs/runs.md#repos): credentials come later."""
        configuration = self.configuration
        branch = single_branch(configuration.single_branch, getattr(configuration, "type", "task"))
        return [
            RepoClone(
                index=index,
                url=repo.url or "",
                branch=repo.branch,
                hash=repo.hash,
                place=archive_path(repo.as_file(), configuration.working_dir),
                if_exists=repo.if_exists.value,
                single_branch=branch,
            )
            for index, repo in cloned_repos(configuration.repos)
        ]

    def image(self) -> str | None:
        """The image each job runs in: `image`, or the one of `python`; None: on the host."""
        configuration = self.configuration
        if configuration.python is not None:
            return python_image(configuration.python)
        return configuration.image

    def container_spec(self) -> ContainerSpec | None:
        """The container each job runs in, when the configuration names an `image` or a `python`
        (docs/containers.md)."""
        configuration = self.configuration
        image = self.image()
        if image is None:
            return None
        auth = configuration.registry_auth
        shm_size = configuration.resources.shm_size
        return ContainerSpec(
            image=image,
            python=configuration.python,
            entrypoint=shlex.split(configuration.entrypoint) if configuration.entrypoint else None,
            user=configuration.user,
            privileged=configuration.privileged,
            shm_size=round(shm_size * BYTES_PER_GB) if shm_size else None,
            registry_auth=RegistryCredentials(username=auth.username, password=auth.password)
            if auth
            else None,
        )

    def inactivity_duration(self) -> int | None:
        """Seconds without an SSH connection after which the agent ends the job (a dev environment's)."""
        return None


def _agent_grace(stop_duration: int | None) -> int:
    """The grace the agent gives a job it ends itself (max_duration): `off` is no limit."""
    return UNLIMITED_GRACE if stop_duration is None else stop_duration
