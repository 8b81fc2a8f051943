"""A project's backends as `ferry backend` and `ferry apply -f slurm.yml` reach them (docs/teams.md#backends):
through Ferry's API as the logged-in user (`RemoteBackends`), which checks the login node and seals the
key; or over the store itself (`StoreBackends`): the API's routes, as their caller, and an operator's CLI
with Temporal's address and no login, as the operator. Applications and deletions are kept with their
actor."""

from __future__ import annotations

import asyncio
from typing import Protocol
from urllib.parse import quote

from api.messages import AppliedBackend, BackendInfo
from cli.remote_runs import ApiSession
from core.configuration import SlurmBackendConfiguration
from store import Store

SUBJECT = "backend"  # in the store's changes


class ProjectBackends(Protocol):
    project: str

    def listed(self) -> list[BackendInfo]: ...
    async def apply(self, configuration: SlurmBackendConfiguration, login_key: str) -> AppliedBackend: ...
    def delete(self, name: str) -> None: ...


class RemoteBackends:
    """Through the API (api/backend_routes.py)."""

    def __init__(self, session: ApiSession, project: str) -> None:
        self.session = session
        self.project = project
        self._base = f"/api/projects/{quote(project, safe='')}/backends"

    def listed(self) -> list[BackendInfo]:
        return [BackendInfo.model_validate(item) for item in self.session.request("GET", self._base).json()]

    async def apply(self, configuration: SlurmBackendConfiguration, login_key: str) -> AppliedBackend:
        import json

        body = {"configuration": json.loads(configuration.model_dump_json()), "login_key": login_key}
        answer = await asyncio.to_thread(self.session.request, "POST", self._base, json=body, timeout=120)
        return AppliedBackend.model_validate(answer.json())

    def delete(self, name: str) -> None:
        self.session.request("DELETE", f"{self._base}/{quote(name, safe='')}")


class StoreBackends:
    """The store itself (cli.backend_api); each application and deletion kept as `by`'s change (None: the
    operator's)."""

    def __init__(self, store: Store, project: str, by: str | None = None) -> None:
        self.store = store
        self.project = project
        self.by = by

    def listed(self) -> list[BackendInfo]:
        from cli.backend_api import backend_where

        return [
            BackendInfo(name=record.name, type=record.type, where=backend_where(record))
            for record in self.store.list_backends(self.project)
        ]

    async def apply(self, configuration: SlurmBackendConfiguration, login_key: str) -> AppliedBackend:
        """Checked against its login node first: nothing is recorded for a backend that does not answer."""
        from cli.backend_api import checked_partitions, record_backend

        partitions = await checked_partitions(configuration, login_key)
        name = configuration.backend_name
        await asyncio.to_thread(record_backend, self.store, self.project, configuration, login_key)
        await asyncio.to_thread(self.store.record_change, self.project, self.by, SUBJECT, name, "applied")
        return AppliedBackend(name=name, partitions=partitions)

    def delete(self, name: str) -> None:
        from cli.backend_api import delete_backend

        delete_backend(self.store, self.project, name)
        self.store.record_change(self.project, self.by, SUBJECT, name, "deleted")
