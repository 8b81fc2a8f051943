"""`ferry attach` through the API (docs/teams.md#attach): the way into a running job of a run, computed
here over the store and Temporal (cli/ssh_routes.py), so that a user's CLI needs neither."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request

from api.attach_messages import SSHRoute, SSHRouteAsk
from api.auth import caller, require_in, store_of
from api.messages import RUN_REFUSALS
from api.temporal import one_line_errors, temporal_client
from cli.errors import RunNotFound
from cli.ssh_routes import ssh_route
from core.teams.roles import Action, Caller
from store.repository import Store

router = APIRouter(prefix="/api/projects/{project}", responses=RUN_REFUSALS)


@router.post("/runs/{name}/ssh-route")
async def ssh_route_of(
    project: str,
    name: str,
    ask: SSHRouteAsk,
    request: Request,
    who: Caller = Depends(caller),
    store: Store = Depends(store_of),
) -> SSHRoute:
    """Where the job's agent lets its user in, and the `Host` entries that reach it; 409 while there is no
    way in (the run has finished, the job is not running). `submit runs`, not `read runs`: what it opens is
    a shell in the job, as the run's own commands run (docs/teams.md#attach)."""
    require_in(store, who, Action.SUBMIT_RUNS, project)
    with one_line_errors():
        run = await asyncio.to_thread(store.find_run, project, name)
        if run is None:
            raise RunNotFound(f"no run named {name!r} in project {project!r}")
        return await ssh_route(store, lambda: temporal_client(request), run, ask.replica, ask.job)
