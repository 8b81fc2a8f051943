"""A project's fleets as `ferry fleet`, `ferry apply -f fleet.yml` and `ferry set-priority` reach them
(docs/teams.md#fleets): through Ferry's API as the logged-in user (`RemoteFleets`), or over the store and a
Temporal client (`StoreFleets`): the API's routes, as their caller, and an operator's CLI with Temporal's
address and no login, as the operator. Creations and deletions are kept with their actor."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

from api.messages import AppliedFleet, DeletedFleet, FleetPlan, FleetRow
from cli.remote_runs import ApiSession
from core.configuration import FleetConfiguration, RunConfiguration
from core.fleets.messages import FleetDescription
from core.fleets.offers import FleetOffer
from store import Store

if TYPE_CHECKING:  # Temporal's SDK is imported only where a fleet's scheduler is reached
    from cli.fleet_api import FleetAPI

SUBJECT = "fleet"  # in the store's changes


class ProjectFleets(Protocol):
    project: str

    def listed(self) -> list[FleetRow]: ...
    def plan(self, configuration: FleetConfiguration, name: str | None) -> FleetPlan: ...
    async def apply(self, configuration: FleetConfiguration, name: str | None) -> AppliedFleet: ...
    async def describe(self, name: str) -> FleetDescription: ...
    async def delete(self, name: str, wait: float) -> DeletedFleet: ...
    async def set_priority(self, run_name: str, priority: int) -> None: ...
    async def offer(self, configuration: RunConfiguration) -> FleetOffer: ...


class RemoteFleets:
    """Through the API (api/fleet_routes.py). `env`'s bare NAMEs are taken here, where the user applies."""

    def __init__(self, session: ApiSession, project: str) -> None:
        self.session = session
        self.project = project
        self._base = f"/api/projects/{quote(project, safe='')}"

    def listed(self) -> list[FleetRow]:
        answer = self.session.request("GET", f"{self._base}/fleets")
        return [FleetRow.model_validate(item) for item in answer.json()]

    def plan(self, configuration: FleetConfiguration, name: str | None) -> FleetPlan:
        answer = self.session.request("POST", f"{self._base}/fleet-plans", json=_body(configuration, name))
        return FleetPlan.model_validate(answer.json())

    async def apply(self, configuration: FleetConfiguration, name: str | None) -> AppliedFleet:
        import os

        from cli.errors import FerryError

        try:
            env = configuration.resolved_env(os.environ)
        except ValueError as err:
            raise FerryError(str(err)) from None
        body = _body(configuration.model_copy(update={"env": env}), name)
        answer = await asyncio.to_thread(self.session.request, "POST", f"{self._base}/fleets", json=body)
        return AppliedFleet.model_validate(answer.json())

    async def describe(self, name: str) -> FleetDescription:
        path = f"{self._base}/fleets/{quote(name, safe='')}"
        answer = await asyncio.to_thread(self.session.request, "GET", path)
        return FleetDescription.model_validate(answer.json())

    async def delete(self, name: str, wait: float) -> DeletedFleet:
        path = f"{self._base}/fleets/{quote(name, safe='')}"
        answer = await asyncio.to_thread(
            self.session.request, "DELETE", path, params={"wait": wait}, timeout=wait + 30
        )
        return DeletedFleet.model_validate(answer.json())

    async def set_priority(self, run_name: str, priority: int) -> None:
        path = f"{self._base}/runs/{quote(run_name, safe='')}/priority"
        await asyncio.to_thread(self.session.request, "PUT", path, json={"priority": priority})

    async def offer(self, configuration: RunConfiguration) -> FleetOffer:
        import json

        body = {"configuration": json.loads(configuration.model_dump_json())}
        path = f"{self._base}/offers"
        answer = await asyncio.to_thread(self.session.request, "POST", path, json=body, timeout=120)
        return FleetOffer.model_validate(answer.json())


def _body(configuration: FleetConfiguration, name: str | None) -> dict[str, object]:
    import json

    return {"configuration": json.loads(configuration.model_dump_json(exclude_unset=True)), "name": name}


class StoreFleets:
    """The store and a Temporal client (cli.fleet_api.FleetAPI, made on first need by `fleet_api`); each
    creation and deletion kept as `by`'s change (None: the operator's). `environ`: where `env`'s bare
    NAMEs are taken from (None: this process's environment; the API gives none)."""

    def __init__(
        self,
        store: Store,
        project: str,
        fleet_api: Callable[[], Awaitable[FleetAPI]],
        *,
        by: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.store = store
        self.project = project
        self._fleet_api = fleet_api
        self.by = by
        self.environ = environ

    def listed(self) -> list[FleetRow]:
        from cli.fleet_api import list_fleets

        return [FleetRow(fleet=f, instances=i) for f, i in list_fleets(self.store, self.project)]

    def plan(self, configuration: FleetConfiguration, name: str | None) -> FleetPlan:
        """FerryError, before anything is made, where no backend of the project can create its instances."""
        if configuration.is_ssh:
            return FleetPlan(backend=None)
        from cli.fleet_api import backend_for

        return FleetPlan(backend=backend_for(self.store, self.project, configuration, name or "-"))

    async def apply(self, configuration: FleetConfiguration, name: str | None) -> AppliedFleet:
        fleets = await self._fleet_api()
        record, created = await fleets.apply(configuration, name, self.environ)
        if created:
            await asyncio.to_thread(
                self.store.record_change, self.project, self.by, SUBJECT, record.name, "created"
            )
        return AppliedFleet(fleet=record, created=created)

    async def describe(self, name: str) -> FleetDescription:
        return await (await self._fleet_api()).describe(name)

    async def delete(self, name: str, wait: float) -> DeletedFleet:
        described = await (await self._fleet_api()).delete(name, wait=wait)
        await asyncio.to_thread(self.store.record_change, self.project, self.by, SUBJECT, name, "deleted")
        return DeletedFleet(described=described)

    async def set_priority(self, run_name: str, priority: int) -> None:
        await (await self._fleet_api()).set_priority(run_name, priority)

    async def offer(self, configuration: RunConfiguration) -> FleetOffer:
        from cli.offer_api import ask_offer

        return await ask_offer(self.store, await self._fleet_api(), configuration)
