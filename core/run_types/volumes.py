"""A run's `volumes` as each of its jobs mounts them (docs/volumes.md), pure.

A named volume's name is interpolated with the job's node rank (`data-${{ dstack.node_rank }}`); of a
list of names, the job takes the first that existed at submission (`volume_instances`, which FerryAPI
resolves from the store), else the first, whose absence then fails the job with its name. The named
volumes decide where the job may be placed: on their instance.
"""

from __future__ import annotations

from core.configuration import BaseRunConfiguration, InstanceVolume
from core.configuration.interpolation import interpolate
from core.wire.volumes import JobVolume


def job_volumes(
    configuration: BaseRunConfiguration, project: str, node_rank: int, volume_instances: dict[str, str]
) -> list[JobVolume]:
    """The volumes of the job at `node_rank`, in the configuration's order."""
    volumes = []
    for volume in configuration.volumes:
        if isinstance(volume, InstanceVolume):
            volumes.append(
                JobVolume(path=volume.path, instance_path=volume.instance_path, optional=volume.optional)
            )
            continue
        templates = [volume.name] if isinstance(volume.name, str) else volume.name
        names = [interpolate(template, node_rank) for template in templates]
        name = next((n for n in names if n in volume_instances), names[0])
        volumes.append(JobVolume(path=volume.path, name=name, project=project))
    return volumes


def candidate_names(configuration: BaseRunConfiguration, nodes: int) -> list[str]:
    """Every volume name a job of the run may use, each once: what submission looks up."""
    names: list[str] = []
    for volume in configuration.volumes:
        if isinstance(volume, InstanceVolume):
            continue
        templates = [volume.name] if isinstance(volume.name, str) else volume.name
        names += [interpolate(template, rank) for rank in range(nodes) for template in templates]
    return list(dict.fromkeys(names))


def volumes_instance(volumes: list[JobVolume], volume_instances: dict[str, str]) -> str | None:
    """The instance a job must be placed on: its first named volume's (FerryAPI refuses a run whose
    volumes are on different instances); None: anywhere."""
    return next(
        (volume_instances[v.name] for v in volumes if v.name is not None and v.name in volume_instances),
        None,
    )
