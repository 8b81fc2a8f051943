"""A run's schedule and metrics through the API (docs/teams.md#schedules-and-metrics): what `ferry schedule
pause|resume|trigger` and `ferry metrics` send. Both need Temporal, which only the API reaches; a run of
another project is not there (404), as for a caller who is not a member of that project (403 first)."""

from __future__ import annotations

import functools

from fastapi import APIRouter, Depends, Request

from api.auth import caller, require, store_of
from api.messages import RUN_REFUSALS
from api.run_tool_messages import RunMetrics, ScheduleChange
from api.temporal import one_line_errors, temporal_client
from cli.run_tool_clients import StoreRunTools
from core.teams.roles import Action, Caller

router = APIRouter(prefix="/api/projects/{project}/runs/{name}", responses=RUN_REFUSALS)


def _tools(request: Request, project: str, who: Caller) -> StoreRunTools:
    """Temporal is reached only once the run is found and can answer."""
    connect = functools.partial(temporal_client, request)
    return StoreRunTools(store_of(request), project, connect, user=who.name)


@router.post("/schedule", status_code=204)
async def change_schedule(
    project: str, name: str, change: ScheduleChange, request: Request, who: Caller = Depends(caller)
) -> None:
    """The run's schedule paused, resumed (the caller named in its note) or triggered."""
    require(who, Action.SUBMIT_RUNS, project)
    with one_line_errors():
        await _tools(request, project, who).schedule(name, change.action)


@router.get("/metrics")
async def run_metrics(
    project: str, name: str, request: Request, by_id: bool = False, who: Caller = Depends(caller)
) -> RunMetrics:
    """The latest submission of each of its jobs, the running ones with what their agents measure now
    (`400` for a finished run: it has none)."""
    require(who, Action.READ_RUNS, project)
    with one_line_errors():
        return await _tools(request, project, who).metrics(name, by_id=by_id)
