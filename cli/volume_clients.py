"""A project's named volumes as `ferry volume` reaches them (docs/teams.md#volumes): through Ferry's API as
the logged-in user (`RemoteVolumes`), or over the store itself (`StoreVolumes`): the API's routes, and an
operator's CLI with Temporal's address and no login."""

from __future__ import annotations

from typing import Protocol
from urllib.parse import quote

from api.messages import CreatedVolume, VolumeInfo
from cli.remote_runs import ApiSession
from core.configuration import VolumeConfiguration
from store import Store, VolumeRecord


def volume_info(record: VolumeRecord) -> VolumeInfo:
    return VolumeInfo(
        name=record.name,
        fleet=record.fleet,
        instance=record.instance,
        attached_to=record.attached_to,
        created_at=record.created_at,
    )


class ProjectVolumes(Protocol):
    project: str

    def create(self, configuration: VolumeConfiguration, name: str | None = None) -> CreatedVolume: ...
    def listed(self) -> list[VolumeInfo]: ...
    def delete(self, name: str) -> VolumeInfo: ...  # the volume deleted


class RemoteVolumes:
    """Through the API (api/volume_routes.py)."""

    def __init__(self, session: ApiSession, project: str) -> None:
        self.session = session
        self.project = project
        self._base = f"/api/projects/{quote(project, safe='')}/volumes"

    def create(self, configuration: VolumeConfiguration, name: str | None = None) -> CreatedVolume:
        body = {"configuration": configuration.model_dump(mode="json", exclude_unset=True), "name": name}
        return CreatedVolume.model_validate(self.session.request("POST", self._base, json=body).json())

    def listed(self) -> list[VolumeInfo]:
        return [VolumeInfo.model_validate(item) for item in self.session.request("GET", self._base).json()]

    def delete(self, name: str) -> VolumeInfo:
        answer = self.session.request("DELETE", f"{self._base}/{quote(name, safe='')}")
        return VolumeInfo.model_validate(answer.json())


class StoreVolumes:
    """The store itself (cli.volume_api)."""

    def __init__(self, store: Store, project: str) -> None:
        self.store = store
        self.project = project

    def create(self, configuration: VolumeConfiguration, name: str | None = None) -> CreatedVolume:
        import asyncio

        from cli.volume_api import create_volume

        record, created = asyncio.run(create_volume(self.store, self.project, configuration, name))
        return CreatedVolume(volume=volume_info(record), created=created)

    def listed(self) -> list[VolumeInfo]:
        return [volume_info(record) for record in self.store.list_volumes(self.project)]

    def delete(self, name: str) -> VolumeInfo:
        from cli.volume_api import delete_volume

        return volume_info(delete_volume(self.store, self.project, name))
