"""A project's backends through the API (docs/teams.md#backends): `ferry backend` and `ferry apply -f
slurm.yml` call these. Members list them; managers apply and delete them, each kept with its caller as
actor. The API checks a backend against its login node and seals its login key; it never answers one."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from api.auth import caller, require_in, store_of
from api.messages import RUN_REFUSALS, AppliedBackend, BackendApplication, BackendInfo
from api.temporal import one_line_errors
from cli.backend_clients import StoreBackends
from core.teams.roles import Action, Caller
from store.repository import Store

router = APIRouter(prefix="/api/projects/{project}/backends", responses=RUN_REFUSALS)


def _backends(store: Store, project: str, who: Caller, action: Action) -> StoreBackends:
    """403 unless `who`'s role allows `action`; 404 for a project that does not exist."""
    require_in(store, who, action, project)
    return StoreBackends(store, project, by=who.name)


@router.get("")
def backends_of(
    project: str, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> list[BackendInfo]:
    return _backends(store, project, who, Action.READ_RESOURCES).listed()


@router.post("")
async def apply_backend(
    project: str, body: BackendApplication, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> AppliedBackend:
    """Checked against its login node (Slurm answers, and has every partition it lists), then recorded
    with its key sealed; a backend of its name is replaced."""
    backends = _backends(store, project, who, Action.MANAGE_RESOURCES)
    with one_line_errors():
        return await backends.apply(body.configuration, body.login_key)


@router.delete("/{name}", status_code=204)
def delete_backend(
    project: str, name: str, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> Response:
    """Forgotten with its sealed key: fleets that use it can create no more instances."""
    backends = _backends(store, project, who, Action.MANAGE_RESOURCES)
    with one_line_errors():
        backends.delete(name)
    return Response(status_code=204)
