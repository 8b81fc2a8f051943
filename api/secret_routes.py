"""A project's secrets through the API (docs/teams.md#secrets): `ferry secret` calls these. Members list the
names; managers set and delete them. The API seals a value as it arrives and never answers one; the caller
is recorded as each change's actor (docs/teams.md#who-did-it)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from api.auth import Refused, caller, require_in, store_of
from api.messages import RUN_REFUSALS, RepoCredential, SecretInfo, SecretSet, SecretValue
from cli.errors import FerryError
from cli.secret_clients import StoreSecrets
from core.secrets import check_secret_name, check_secret_value
from core.teams.roles import Action, Caller
from store.repository import Store

router = APIRouter(prefix="/api/projects/{project}", responses=RUN_REFUSALS)


def _secrets(store: Store, project: str, who: Caller, action: Action) -> StoreSecrets:
    """The project's secrets as `who` acts on them: 403 unless their role allows `action`, 404 for a
    project that does not exist (an admin may name any)."""
    require_in(store, who, action, project)
    return StoreSecrets(store, project, by=who.name)


def _checked(name: str | None, value: str | None = None) -> None:
    """422 with the reason for a name (or a value) no secret may have."""
    try:
        if name is not None:
            check_secret_name(name)
        if value is not None:
            check_secret_value(value)
    except ValueError as err:
        raise Refused(422, str(err)) from None


@router.get("/secrets")
def secrets_of(
    project: str, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> list[SecretInfo]:
    return _secrets(store, project, who, Action.READ_SECRETS).listed()


@router.put("/secrets/{name}")
def put_secret(
    project: str,
    name: str,
    body: SecretValue,
    who: Caller = Depends(caller),
    store: Store = Depends(store_of),
) -> SecretSet:
    secrets = _secrets(store, project, who, Action.MANAGE_SECRETS)
    _checked(name, body.value)
    return SecretSet(name=name, created=secrets.set(name, body.value))


@router.post("/repo-credentials", status_code=201)
def put_repo_credential(
    project: str, body: RepoCredential, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> SecretSet:
    """Stored as the secret the repo's URL names (docs/runs.md#private-repos)."""
    secrets = _secrets(store, project, who, Action.MANAGE_SECRETS)
    _checked(None, body.value)
    try:
        name = secrets.set_repo(body.url, body.value, ssh_key=body.ssh_key)
    except FerryError as err:
        raise Refused(422, str(err)) from None
    return SecretSet(name=name, created=True)


@router.delete("/secrets/{name}", status_code=204)
def remove_secret(
    project: str, name: str, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> Response:
    secrets = _secrets(store, project, who, Action.MANAGE_SECRETS)
    _checked(name)
    try:
        secrets.delete(name)
    except FerryError as err:
        raise Refused(404, str(err)) from None
    return Response(status_code=204)
