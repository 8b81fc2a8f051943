"""A project's fleets through the API (docs/teams.md#fleets): `ferry fleet`, `ferry apply -f fleet.yml` and
`ferry set-priority` call these. Members list and describe fleets; managers apply and delete them, each
kept with its caller as actor (docs/teams.md#who-did-it); a run's priority is its submitters' to set."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response

from api.auth import caller, require_in, store_of
from api.messages import (
    RUN_REFUSALS,
    AppliedFleet,
    DeletedFleet,
    FleetApplication,
    FleetPlan,
    FleetRow,
    NewPriority,
    OfferAsk,
)
from api.temporal import one_line_errors, temporal_client
from cli.api import FerryAPI
from cli.fleet_api import FleetAPI
from cli.fleet_clients import StoreFleets
from core.fleets.messages import FleetDescription
from core.fleets.offers import FleetOffer
from core.teams.roles import Action, Caller

router = APIRouter(prefix="/api/projects/{project}", responses=RUN_REFUSALS)
MAX_WAIT = 120.0  # seconds a deletion waits for an idle fleet to be gone


def _fleets(request: Request, project: str, who: Caller, action: Action) -> StoreFleets:
    """The project's fleets as `who` acts on them: 403 unless their role allows `action`, 404 for a
    project that does not exist. `env` is never filled from the API's own environment."""
    store = store_of(request)
    require_in(store, who, action, project)

    async def fleet_api() -> FleetAPI:
        return FerryAPI(await temporal_client(request), store, project=project).fleets()

    return StoreFleets(store, project, fleet_api, by=who.name, environ={})


@router.get("/fleets")
def fleets_of(project: str, request: Request, who: Caller = Depends(caller)) -> list[FleetRow]:
    return _fleets(request, project, who, Action.READ_RESOURCES).listed()


@router.post("/fleet-plans")
def plan_fleet(
    project: str, body: FleetApplication, request: Request, who: Caller = Depends(caller)
) -> FleetPlan:
    """What `ferry apply` shows before it asks: the backend that would create its instances; a fleet no
    backend of the project can create is refused here, before anything is made."""
    fleets = _fleets(request, project, who, Action.MANAGE_RESOURCES)
    with one_line_errors():
        return fleets.plan(body.configuration, body.name)


@router.post("/fleets")
async def apply_fleet(
    project: str, body: FleetApplication, request: Request, who: Caller = Depends(caller)
) -> AppliedFleet:
    """The fleet created (`created`; its hosts then deploy), or found as it was; 409 for one of its name
    with another configuration."""
    fleets = _fleets(request, project, who, Action.MANAGE_RESOURCES)
    with one_line_errors():
        return await fleets.apply(body.configuration, body.name)


@router.get("/fleets/{name}")
async def describe_fleet(
    project: str, name: str, request: Request, who: Caller = Depends(caller)
) -> FleetDescription:
    """The fleet as its scheduler sees it now: instances, capacity, the deployment, the queue."""
    fleets = _fleets(request, project, who, Action.READ_RESOURCES)
    with one_line_errors():
        return await fleets.describe(name)


@router.delete("/fleets/{name}")
async def delete_fleet(
    project: str, name: str, request: Request, wait: float = 0.0, who: Caller = Depends(caller)
) -> DeletedFleet:
    """No new jobs go to the fleet; its instances go once their jobs have ended. Waits up to `wait`
    seconds (at most 120) for an idle fleet to be gone."""
    fleets = _fleets(request, project, who, Action.MANAGE_RESOURCES)
    with one_line_errors():
        return await fleets.delete(name, max(0.0, min(wait, MAX_WAIT)))


@router.put("/runs/{name}/priority", status_code=204)
async def set_priority(
    project: str, name: str, body: NewPriority, request: Request, who: Caller = Depends(caller)
) -> Response:
    """The run's waiting jobs move in their fleet's queue (0-100, high first)."""
    fleets = _fleets(request, project, who, Action.SUBMIT_RUNS)
    with one_line_errors():
        await fleets.set_priority(name, body.priority)
    return Response(status_code=204)


@router.post("/offers")
async def offer(project: str, body: OfferAsk, request: Request, who: Caller = Depends(caller)) -> FleetOffer:
    """`ferry offer`: where a run of the configuration could go now, as the fleet it would be submitted to
    answers (and its backend, for a fleet with `nodes`); nothing is submitted, queued or held."""
    fleets = _fleets(request, project, who, Action.READ_RESOURCES)
    with one_line_errors():
        return await fleets.offer(body.configuration)
