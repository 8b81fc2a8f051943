"""Who calls the API: the bearer token's user (401 when there is none, or it is unknown or revoked), and
the one check every route makes (403 with the line `core.teams.roles.refusal` gives; docs/teams.md#roles).
"""

from __future__ import annotations

from fastapi import Header, HTTPException, Request

from core.services.replicas import token_hash
from core.teams.roles import Action, Caller, refusal
from store.repository import Store

NO_TOKEN = "no token: log in with `ferry login URL` (or set FERRY_TOKEN)"
BAD_TOKEN = "the token is not valid: unknown or revoked (ask an admin for a new one)"


class Refused(HTTPException):
    """An answer with one line, `{"detail": ...}`; a 401 asks for a bearer token."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        if status == 401:
            headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
        super().__init__(status_code=status, detail=detail, headers=headers)


def store_of(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def caller(request: Request, authorization: str | None = Header(default=None)) -> Caller:
    """The route's caller, from `Authorization: Bearer <token>` (a sync dependency: the store is sync)."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Refused(401, NO_TOKEN)
    found = store_of(request).caller_for_token_hash(token_hash(token.strip()))
    if found is None:
        raise Refused(401, BAD_TOKEN)
    return found


def require(who: Caller, action: Action, project: str | None = None) -> None:
    """Nothing when `who` may do `action` (in `project`); else 403 with the reason."""
    why = refusal(who, action, project)
    if why is not None:
        raise Refused(403, why)


def require_in(store: Store, who: Caller, action: Action, project: str) -> None:
    """`require`, then 404 for a project that does not exist (an admin may name any)."""
    require(who, action, project)
    if not any(found.name == project for found in store.list_projects()):
        raise Refused(404, f"no project {project}")
