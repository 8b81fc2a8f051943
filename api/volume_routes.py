"""A project's named volumes through the API (docs/teams.md#volumes): `ferry volume` and `ferry apply -f
volume.yml` call these. Members list them; managers create and delete them."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import ValidationError

from api.auth import Refused, caller, require_in, store_of
from api.messages import RUN_REFUSALS, CreatedVolume, NewVolume, VolumeInfo
from api.temporal import one_line_errors
from cli.volume_clients import StoreVolumes
from core.configuration import VolumeConfiguration
from core.teams.roles import Action, Caller
from store.repository import Store

router = APIRouter(prefix="/api/projects/{project}/volumes", responses=RUN_REFUSALS)


def _volumes(store: Store, project: str, who: Caller, action: Action) -> StoreVolumes:
    """403 unless `who`'s role allows `action`; 404 for a project that does not exist."""
    require_in(store, who, action, project)
    return StoreVolumes(store, project)


@router.get("")
def volumes_of(
    project: str, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> list[VolumeInfo]:
    return _volumes(store, project, who, Action.READ_RESOURCES).listed()


@router.post("")
def create_volume(
    project: str, body: NewVolume, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> CreatedVolume:
    """The volume created (`created`), or found as it was; 409 for one of its name that differs."""
    volumes = _volumes(store, project, who, Action.MANAGE_RESOURCES)
    try:
        configuration = VolumeConfiguration.model_validate({**body.configuration, "type": "volume"})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise Refused(422, f"{where}: {str(first['msg']).removeprefix('Value error, ')}") from None
    with one_line_errors():
        return volumes.create(configuration, body.name)


@router.delete("/{name}")
def delete_volume(
    project: str, name: str, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> VolumeInfo:
    """The volume deleted (its directory stays on its instance); 409 while a job holds it."""
    volumes = _volumes(store, project, who, Action.MANAGE_RESOURCES)
    with one_line_errors():
        return volumes.delete(name)
