"""Named volumes in Ferry's Python API (docs/volumes.md): create, list, delete, and where a run naming
them goes.

A volume is a VolumeRecord in the store: a directory on one instance of a fleet, which its instance's
agent creates when a job first mounts it. Nothing here needs Temporal; the attachment to a job is the
jobs' own (activities/volumes.py).
"""

from __future__ import annotations

import asyncio
import time

from pydantic import TypeAdapter, ValidationError

from cli.errors import FerryError, NotFound
from core.configuration import FleetConfiguration, RunConfiguration, VolumeConfiguration
from core.configuration.fields import Name
from core.fleets.book import instance_name
from core.fleets.status import FleetStatus
from core.run_types import configurator_for
from core.run_types.volumes import candidate_names, job_volumes
from core.wire.workflow_ids import LOCAL_FLEET, LOCAL_INSTANCE
from store import Store, VolumeRecord
from store.volume_repository import VolumeInUse, volume_id


class VolumeNotFound(NotFound):
    pass


async def create_volume(
    store: Store, project: str, configuration: VolumeConfiguration, name: str | None = None
) -> tuple[VolumeRecord, bool]:
    """The volume created, or the same volume again unchanged; True if created. Its fleet: `fleet`, else
    where a run without `fleets` goes; its instance: `instance`, else the fleet's first."""
    from cli.fleet_api import first_fleet

    name = name or configuration.name
    if name is None:
        raise FerryError("a volume needs a name: set `name` in the file or pass -n NAME")
    try:
        TypeAdapter(Name).validate_python(name)
    except ValidationError as err:
        raise FerryError(str(err.errors()[0]["msg"]).removeprefix("Value error, ")) from None
    fleet = await first_fleet(store, project, [configuration.fleet] if configuration.fleet else None)
    instances = await asyncio.to_thread(_instances_of, store, project, fleet)
    instance = configuration.instance or instances[0]
    if instance not in instances:
        raise FerryError(
            f"fleet {fleet} has no instance {instance}: its instances are {', '.join(instances)}"
        )
    configuration = configuration.model_copy(update={"name": name, "fleet": fleet, "instance": instance})
    record = VolumeRecord(
        id=volume_id(project, name),
        project=project,
        name=name,
        fleet=fleet,
        instance=instance,
        configuration=configuration.model_dump_json(),
        created_at=time.time(),
    )
    stored = await asyncio.to_thread(store.create_volume, record)
    if stored.configuration != record.configuration:
        raise FerryError(
            f"volume {name} exists on fleet {stored.fleet}, instance {stored.instance}, with another "
            f"configuration: delete it first (ferry volume delete {name})"
        )
    return stored, stored.created_at == record.created_at


def _instances_of(store: Store, project: str, fleet: str) -> list[str]:
    """The names of a fleet's instances, as its configuration lists its hosts (the local fleet: one)."""
    if fleet == LOCAL_FLEET:
        return [LOCAL_INSTANCE]
    record = store.get_fleet(project, fleet)
    assert record is not None  # first_fleet found it active
    hosts = FleetConfiguration.model_validate_json(record.configuration).ssh_config
    return [instance_name(fleet, index) for index in range(len(hosts.hosts if hosts else []))]


def list_volumes(store: Store, project: str) -> list[VolumeRecord]:
    return store.list_volumes(project)


def delete_volume(store: Store, project: str, name: str) -> VolumeRecord:
    """The volume forgotten (its directory stays on its instance); refused while a job holds it."""
    try:
        deleted = store.delete_volume(project, name)
    except VolumeInUse as err:
        raise FerryError(str(err)) from None
    if deleted is None:
        raise VolumeNotFound(f"no volume named {name} in project {project!r} (see ferry volume list)")
    return deleted


def run_volumes(
    store: Store, project: str, configuration: RunConfiguration
) -> tuple[str | None, dict[str, str]]:
    """Where a run naming volumes goes, decided at submission: the fleet of its volumes (None: it names
    none that exists), and each existing volume's instance, where the jobs naming it are placed. A
    volume that does not exist is no refusal here: the job naming it fails with its name."""
    nodes = configurator_for(configuration).nodes_per_replica()
    names = candidate_names(configuration, nodes)
    if not names:
        return None, {}
    found = {record.name: record for record in store.list_volumes(project, names)}
    instances = {name: record.instance for name, record in found.items()}
    used: list[str] = []
    for rank in range(nodes):
        mine = [v.name for v in job_volumes(configuration, project, rank, instances) if v.name in found]
        where = sorted({instances[name] for name in mine})
        if len(where) > 1:
            raise FerryError(
                f"the volumes of node {rank} ({', '.join(mine)}) are on different instances "
                f"({', '.join(where)}): a job runs on one"
            )
        used += mine
    fleets = sorted({found[name].fleet for name in used})
    if len(fleets) > 1:
        raise FerryError(f"the run's volumes are in different fleets ({', '.join(fleets)}): a run uses one")
    if not fleets:
        return None, instances
    fleet = fleets[0]
    if configuration.fleets and fleet not in configuration.fleets:
        raise FerryError(f"the run's volumes are in fleet {fleet}, which its `fleets` does not name")
    record = store.get_fleet(project, fleet)
    if fleet != LOCAL_FLEET and (record is None or record.status != FleetStatus.ACTIVE):
        raise FerryError(f"the run's volumes are in fleet {fleet}, which is deleted")
    return fleet, instances
