"""The API's users, projects and members (docs/teams.md): `ferry user`, `ferry project` and `ferry member`
call these. Each route checks its caller's role first (api.auth.require); nothing is changed by a refused
call."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Depends

from api.auth import Refused, caller, require, store_of
from api.messages import (
    ChangeInfo,
    IssuedToken,
    Me,
    MemberInfo,
    MemberRole,
    NewProject,
    NewUser,
    ProjectInfo,
    Refusal,
    RoleChange,
    UserInfo,
)
from core.services.replicas import token_hash
from core.settings import DEFAULT_PROJECT
from core.teams.roles import Action, Caller, GlobalRole, ProjectRole, keeps_an_admin, visible_projects
from store.repository import Store
from store.team_models import UserRecord, has_token

# Every answer that is not a success is one line (api.auth.Refused; the app's 422): documented so.
router = APIRouter(
    prefix="/api", responses={status: {"model": Refusal} for status in (400, 401, 403, 404, 409, 422)}
)


def _user_info(user: UserRecord) -> UserInfo:
    return UserInfo(
        name=user.name,
        role=GlobalRole(user.role),
        has_token=has_token(user),
        created_at=user.created_at,
    )


def _user(store: Store, name: str) -> UserRecord:
    user = store.get_user(name)
    if user is None:
        raise Refused(404, f"no user {name}")
    return user


def _new_token(store: Store, name: str) -> IssuedToken:
    token = secrets.token_urlsafe(32)
    store.set_token_hash(name, token_hash(token))
    return IssuedToken(user=name, token=token)


@router.get("/me")
def me(who: Caller = Depends(caller)) -> Me:
    return Me(name=who.name, role=who.role, projects=dict(who.projects))


# --- users (a global admin's) -----------------------------------------------------------------------


@router.get("/users")
def list_users(who: Caller = Depends(caller), store: Store = Depends(store_of)) -> list[UserInfo]:
    require(who, Action.MANAGE_USERS)
    return [_user_info(user) for user in store.list_users()]


@router.post("/users", status_code=201)
def add_user(new: NewUser, who: Caller = Depends(caller), store: Store = Depends(store_of)) -> IssuedToken:
    require(who, Action.MANAGE_USERS)
    token = secrets.token_urlsafe(32)
    if not store.add_user(new.name, new.role, token_hash(token)):
        raise Refused(409, f"user {new.name} exists (rotate their token with `ferry user rotate {new.name}`)")
    return IssuedToken(user=new.name, token=token)


@router.put("/users/{name}/role")
def set_user_role(
    name: str, change: RoleChange, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> UserInfo:
    require(who, Action.MANAGE_USERS)
    _user(store, name)
    why = keeps_an_admin(store.admins(), name, change.role)
    if why is not None:
        raise Refused(409, why)
    store.set_user_role(name, change.role)
    return _user_info(_user(store, name))


@router.post("/users/{name}/token")
def rotate_token(name: str, who: Caller = Depends(caller), store: Store = Depends(store_of)) -> IssuedToken:
    """A new token for the user (their old one stops working at once): an admin's for anyone, anyone's
    for themselves, but not with a job's token, which must not outlive its run as a token of its own."""
    if who.job_of is not None:
        raise Refused(403, f"a job's token cannot rotate {who.name}'s token (it is run {who.job_of}'s)")
    if name != who.name:
        require(who, Action.MANAGE_USERS)
    _user(store, name)
    return _new_token(store, name)


@router.delete("/users/{name}/token")
def revoke_token(name: str, who: Caller = Depends(caller), store: Store = Depends(store_of)) -> UserInfo:
    """No token opens anything as the user any more, until an admin rotates it."""
    require(who, Action.MANAGE_USERS)
    _user(store, name)
    why = keeps_an_admin(store.admins(), name, None)
    if why is not None:
        raise Refused(409, why)
    store.set_token_hash(name, None)
    return _user_info(_user(store, name))


# --- projects ---------------------------------------------------------------------------------------


@router.get("/projects")
def list_projects(who: Caller = Depends(caller), store: Store = Depends(store_of)) -> list[ProjectInfo]:
    """The projects the caller sees: a member's, or every one for an admin."""
    projects = {project.name: project for project in store.list_projects()}
    return [
        ProjectInfo(name=name, created_by=projects[name].created_by, created_at=projects[name].created_at)
        for name in visible_projects(who, list(projects))
    ]


@router.post("/projects", status_code=201)
def add_project(
    new: NewProject, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> ProjectInfo:
    require(who, Action.MANAGE_PROJECTS)
    if not store.add_project(new.name, created_by=who.name):
        raise Refused(409, f"project {new.name} exists")
    store.set_member(new.name, who.name, ProjectRole.MANAGER)  # its maker manages it, as in dstack
    return next(ProjectInfo(**p.model_dump()) for p in store.list_projects() if p.name == new.name)


@router.delete("/projects/{project}", status_code=204)
def delete_project(project: str, who: Caller = Depends(caller), store: Store = Depends(store_of)) -> None:
    require(who, Action.MANAGE_PROJECTS)
    _project(store, project)
    if project == DEFAULT_PROJECT:
        raise Refused(409, f"project {project} is every deployment's default: it stays")
    held = store.project_holdings(project)
    if held:
        listed = ", ".join(f"{count} {table}" for table, count in held.items())
        raise Refused(409, f"project {project} still holds {listed}: delete them first (nothing is lost)")
    store.delete_project(project)


def _project(store: Store, project: str) -> None:
    if not any(found.name == project for found in store.list_projects()):
        raise Refused(404, f"no project {project}")


@router.get("/projects/{project}/changes")
def list_changes(
    project: str, limit: int = 100, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> list[ChangeInfo]:
    """Who set, changed and deleted the project's secrets, fleets and backends, oldest first (the latest
    `limit`, 1 to 1,000; docs/teams.md#who-did-it)."""
    require(who, Action.READ_MEMBERS, project)
    _project(store, project)
    return [
        ChangeInfo(at=c.at, actor=c.actor, subject=c.subject, name=c.name, change=c.change)
        for c in store.list_changes(project, max(1, min(limit, 1000)))
    ]


# --- members ----------------------------------------------------------------------------------------


@router.get("/projects/{project}/members")
def list_members(
    project: str, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> list[MemberInfo]:
    require(who, Action.READ_MEMBERS, project)
    _project(store, project)
    return [MemberInfo(user=m.user_name, role=ProjectRole(m.role)) for m in store.members(project)]


@router.put("/projects/{project}/members/{name}")
def set_member(
    project: str, name: str, role: MemberRole, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> MemberInfo:
    require(who, Action.MANAGE_MEMBERS, project)
    _project(store, project)
    _user(store, name)
    store.set_member(project, name, role.role)
    return MemberInfo(user=name, role=role.role)


@router.delete("/projects/{project}/members/{name}", status_code=204)
def remove_member(
    project: str, name: str, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> None:
    require(who, Action.MANAGE_MEMBERS, project)
    _project(store, project)
    if not store.remove_member(project, name):
        raise Refused(404, f"{name} is not a member of project {project}")
