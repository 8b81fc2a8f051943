"""Who may do what in a shared Ferry: the global role, the project roles and the one decision every API
route asks (docs/teams.md#roles). Pure: the API looks up the caller and their memberships, then asks
`refusal`; a refusal is the one line the API answers with 403.

As dstack has them: a global `admin` may do everything, in every project, members or not; every other
user is a global `user`, who may act only in the projects they belong to, as that project's `manager`
(its members, fleets, backends, volumes, secrets and schedules, and every run) or `user` (runs; and what
a run needs to be planned: reading fleets, volumes, backends and offers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class GlobalRole(StrEnum):
    ADMIN = "admin"
    USER = "user"


class ProjectRole(StrEnum):
    MANAGER = "manager"
    USER = "user"


class Action(StrEnum):
    """What an API route does, as the roles see it: read or change one kind of thing of a project, or of
    the whole deployment (users and projects themselves)."""

    READ_RUNS = "read runs"  # ps, logs, events, metrics, attach, the proxy's services
    SUBMIT_RUNS = "submit runs"  # apply, stop, delete, schedule trigger
    READ_RESOURCES = "read fleets, volumes and backends"  # fleet list, volume list, offer, plans
    MANAGE_RESOURCES = "manage fleets, volumes and backends"
    READ_SECRETS = "list secret names"
    MANAGE_SECRETS = "set and delete secrets"
    READ_MEMBERS = "list members"
    MANAGE_MEMBERS = "manage members"
    MANAGE_USERS = "manage users"  # global: add, set role, rotate, revoke
    MANAGE_PROJECTS = "create and delete projects"  # global


# Actions that concern the deployment rather than one project: a global admin's only.
GLOBAL_ACTIONS = frozenset({Action.MANAGE_USERS, Action.MANAGE_PROJECTS})

PROJECT_ROLE_ACTIONS: Mapping[ProjectRole, frozenset[Action]] = {
    ProjectRole.USER: frozenset(
        {
            Action.READ_RUNS,
            Action.SUBMIT_RUNS,
            Action.READ_RESOURCES,
            Action.READ_SECRETS,
            Action.READ_MEMBERS,
        }
    ),
    ProjectRole.MANAGER: frozenset(Action) - GLOBAL_ACTIONS,
}


@dataclass(frozen=True)
class Caller:
    """An authenticated user, as the API found them by their token: their global role and the projects
    they belong to, with their role in each."""

    name: str
    role: GlobalRole = GlobalRole.USER
    projects: Mapping[str, ProjectRole] = field(default_factory=dict)
    job_of: str | None = None  # a job's token: the run that holds it (docs/teams.md#a-jobs-token)

    def sees(self, project: str) -> bool:
        """Whether the project exists for this caller at all (listed, named in answers)."""
        return self.role is GlobalRole.ADMIN or project in self.projects


def refusal(caller: Caller, action: Action, project: str | None = None) -> str | None:
    """None when `caller` may do `action` (in `project`, for a project's action); else the one line why
    not, naming what is missing (the API's 403)."""
    if caller.role is GlobalRole.ADMIN:
        return None
    if action in GLOBAL_ACTIONS:
        return f"{caller.name} may not {action}: it takes the global admin role"
    assert project is not None, f"{action} is a project's action: name the project"
    role = caller.projects.get(project)
    if role is None:
        return f"{caller.name} is not a member of project {project}"
    if action not in PROJECT_ROLE_ACTIONS[role]:
        return (
            f"{caller.name} may not {action} in project {project}: it takes the manager role (theirs: {role})"
        )
    return None


def keeps_an_admin(admins: frozenset[str], user: str, new_role: GlobalRole | None) -> str | None:
    """None when giving `user` `new_role` (None: revoking them) leaves the deployment a global admin;
    else why not: with none, no one could add users or projects again."""
    if new_role is GlobalRole.ADMIN or user not in admins or admins - {user}:
        return None
    return f"{user} is the last global admin: make another user admin first"


def visible_projects(caller: Caller, projects: list[str]) -> list[str]:
    """The projects of `projects` this caller sees, in their order: every `ferry ps`, `logs`, `events`,
    `offer` and list answers from these only."""
    return [project for project in projects if caller.sees(project)]
