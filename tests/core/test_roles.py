"""The roles' decision (core/teams/roles.py, docs/teams.md#roles), table-driven over every action × role ×
project: a global admin everywhere; a project's manager everything of their project; its user runs and
what a plan reads; no one anything in a project they are not a member of."""

from __future__ import annotations

import pytest

from core.teams.roles import (
    GLOBAL_ACTIONS,
    Action,
    Caller,
    GlobalRole,
    ProjectRole,
    keeps_an_admin,
    refusal,
    visible_projects,
)

ADMIN = Caller("root", GlobalRole.ADMIN)
ALICE = Caller("alice", projects={"a": ProjectRole.MANAGER, "b": ProjectRole.USER})
BOB = Caller("bob", projects={"b": ProjectRole.USER})

USER_ACTIONS = {
    Action.READ_RUNS,
    Action.SUBMIT_RUNS,
    Action.READ_RESOURCES,
    Action.READ_SECRETS,
    Action.READ_MEMBERS,
}
PROJECT_ACTIONS = [action for action in Action if action not in GLOBAL_ACTIONS]


@pytest.mark.parametrize("action", PROJECT_ACTIONS)
@pytest.mark.parametrize("project", ["a", "b", "c"])
def test_each_project_action_is_allowed_by_the_role_in_that_project_only(
    action: Action, project: str
) -> None:
    assert refusal(ADMIN, action, project) is None  # in every project, a member or not
    alice = refusal(ALICE, action, project)
    if project == "a":
        assert alice is None
    elif project == "b":
        assert (alice is None) == (action in USER_ACTIONS)
    else:
        assert alice == "alice is not a member of project c"
    bob = refusal(BOB, action, project)
    if project == "b":
        assert (bob is None) == (action in USER_ACTIONS)
    else:
        assert bob == f"bob is not a member of project {project}"


def test_a_refusal_names_what_is_missing() -> None:
    assert refusal(BOB, Action.MANAGE_SECRETS, "b") == (
        "bob may not set and delete secrets in project b: it takes the manager role (theirs: user)"
    )
    assert refusal(ALICE, Action.MANAGE_USERS) == "alice may not manage users: it takes the global admin role"


@pytest.mark.parametrize("action", sorted(GLOBAL_ACTIONS))
def test_users_and_projects_are_a_global_admins_alone(action: Action) -> None:
    assert refusal(ADMIN, action) is None
    assert refusal(ALICE, action) is not None  # a manager of a project is no admin of the deployment
    assert refusal(BOB, action) is not None


def test_a_caller_sees_only_their_projects() -> None:
    projects = ["main", "a", "b", "c"]
    assert visible_projects(ADMIN, projects) == projects
    assert visible_projects(ALICE, projects) == ["a", "b"]
    assert visible_projects(BOB, projects) == ["b"]


def test_the_last_global_admin_stays_one() -> None:
    admins = frozenset({"root"})
    assert keeps_an_admin(admins, "root", GlobalRole.USER) == (
        "root is the last global admin: make another user admin first"
    )
    assert keeps_an_admin(admins, "root", None) is not None  # revoked
    assert keeps_an_admin(admins | {"alice"}, "root", GlobalRole.USER) is None
    assert keeps_an_admin(admins, "bob", None) is None
    assert keeps_an_admin(admins, "root", GlobalRole.ADMIN) is None
