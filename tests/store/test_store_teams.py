"""Users, projects and members in the store (store/team_repository.py, docs/teams.md), and the migration
that gives an existing home's users and records their places (0012)."""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import command

from core.teams.roles import Caller, GlobalRole, ProjectRole
from store.engine import alembic_config, make_engine, migrate
from store.repository import Store


def test_the_first_user_of_a_store_is_its_admin_and_the_next_are_users(store: Store) -> None:
    store.put_user("me", "hash-1")
    store.put_user("me", "hash-2")  # a rotated token keeps the role
    store.put_user("you", "hash-3")
    assert {user.name: user.role for user in store.list_users()} == {"me": "admin", "you": "user"}
    assert store.admins() == frozenset({"me"})
    assert store.user_for_token_hash("hash-1") is None
    assert store.user_for_token_hash("hash-2") == "me"


def test_a_caller_is_found_by_token_with_their_projects_until_revoked(store: Store) -> None:
    assert store.add_user("alice", GlobalRole.USER, "alice-hash")
    assert not store.add_user("alice", GlobalRole.ADMIN, "other")  # left as it is
    assert store.add_project("a", created_by="root")
    assert not store.add_project("a", created_by="alice")
    store.set_member("a", "alice", ProjectRole.USER)
    store.set_member("main", "alice", ProjectRole.MANAGER)
    store.set_member("a", "alice", ProjectRole.MANAGER)  # a new role, not a second membership
    assert store.caller_for_token_hash("alice-hash") == Caller(
        "alice", GlobalRole.USER, {"a": ProjectRole.MANAGER, "main": ProjectRole.MANAGER}
    )
    assert store.set_token_hash("alice", None)
    assert store.caller_for_token_hash("alice-hash") is None
    assert store.set_token_hash("alice", "new-hash")
    caller = store.caller_for_token_hash("new-hash")
    assert caller is not None and caller.name == "alice"
    assert not store.set_token_hash("nobody", "x")


def test_a_project_deleted_takes_its_memberships_only(store: Store) -> None:
    store.add_user("bob", GlobalRole.USER, "bob-hash")
    store.add_project("a", created_by=None)
    store.set_member("a", "bob", ProjectRole.USER)
    store.set_member("main", "bob", ProjectRole.USER)
    assert [project.name for project in store.list_projects()] == ["a", "main"]  # main: every store's
    assert store.delete_project("a")
    assert not store.delete_project("a")
    assert [(m.project, m.user_name) for m in store.members("main")] == [("main", "bob")]
    assert store.members("a") == []
    assert store.remove_member("main", "bob") and not store.remove_member("main", "bob")


def test_an_existing_homes_users_and_projects_are_adopted(db_url: str) -> None:
    command.upgrade(alembic_config(db_url), "0011")
    engine = make_engine(db_url)
    now = time.time()
    with engine.begin() as connection:
        for offset, name in enumerate(["first", "second", "third"]):
            connection.execute(
                sa.text("INSERT INTO users (name, token_hash, created_at) VALUES (:n, :h, :t)"),
                {"n": name, "h": f"{name}-hash", "t": now + offset},
            )
        connection.execute(
            sa.text(
                "INSERT INTO secrets (id, project, name, key_id, sealed, created_at, updated_at) "
                "VALUES ('research/X', 'research', 'X', 'k', x'00', 0, 0)"
            )
        )
    migrate(engine)
    store = Store(engine)
    try:
        assert [project.name for project in store.list_projects()] == ["main", "research"]
        assert store.admins() == frozenset({"first"})
        for name in ("second", "third"):
            assert store.caller_for_token_hash(f"{name}-hash") == Caller(
                name, GlobalRole.USER, {"main": ProjectRole.MANAGER, "research": ProjectRole.MANAGER}
            )
    finally:
        engine.dispose()
