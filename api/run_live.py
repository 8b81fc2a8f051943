"""What `ferry ps` shows beside the store's records, told by the API (docs/teams.md#runs): services' URLs
and probes, stuck runs (docs/upgrades.md#stuck-runs), dev environments' SSH connections (docs/attach.md)
and image pulls (docs/containers.md#pulls); the last three asked of Temporal, which only the API reaches.
A Temporal it cannot reach leaves them out: `ps` shows the store's runs regardless."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from api.auth import Refused, caller, require, store_of
from api.messages import RUN_REFUSALS, LiveAsk, LiveNews
from api.project_runs import ProjectRuns
from api.temporal import temporal_client
from core.teams.roles import Action, Caller
from store.repository import Store

router = APIRouter(prefix="/api/projects/{project}", responses=RUN_REFUSALS)


@router.post("/runs/live")
async def live_news(
    project: str,
    ask: LiveAsk,
    request: Request,
    who: Caller = Depends(caller),
    store: Store = Depends(store_of),
) -> LiveNews:
    require(who, Action.READ_RUNS, project)
    try:
        client = await temporal_client(request)
    except Refused:
        client = None
    return await ProjectRuns(store, client, project).live(ask)
