"""Users, projects and members through the real API process (api/, docs/teams.md): table-driven over every
route x caller (a global admin, a project's manager and user, another project's user, no token, a wrong
one): allowed or refused with the right status, and nothing changed by a refused call."""

from __future__ import annotations

import time
from typing import Any

import pytest

from core.services.replicas import token_hash
from store import RunRecord
from tests.api.conftest import Api

ALL = {"root", "alice", "bob", "carol"}
MANAGERS_OF_A = {"root", "alice"}
FLEET = {"type": "fleet", "name": "far", "ssh_config": {"user": "nobody", "hosts": ["127.0.0.1:9"]}}
# method, path, body, the callers allowed (docs/teams.md#roles)
ROUTES: list[tuple[str, str, dict[str, Any] | None, set[str]]] = [
    ("GET", "/api/me", None, ALL),
    ("GET", "/api/users", None, {"root"}),
    ("POST", "/api/users", {"name": "dave"}, {"root"}),
    ("PUT", "/api/users/carol/role", {"role": "admin"}, {"root"}),
    ("POST", "/api/users/carol/token", None, {"root", "carol"}),
    ("DELETE", "/api/users/carol/token", None, {"root"}),
    ("GET", "/api/projects", None, ALL),
    ("POST", "/api/projects", {"name": "c"}, {"root"}),
    ("DELETE", "/api/projects/b", None, {"root"}),
    ("GET", "/api/projects/a/members", None, {"root", "alice", "bob"}),
    ("GET", "/api/projects/b/members", None, {"root", "carol"}),
    ("PUT", "/api/projects/a/members/carol", {"role": "user"}, {"root", "alice"}),
    ("PUT", "/api/projects/b/members/bob", {"role": "manager"}, {"root"}),
    ("DELETE", "/api/projects/a/members/bob", None, {"root", "alice"}),
    # secrets (docs/teams.md#secrets): members list names and changes, managers set and delete
    ("GET", "/api/projects/a/secrets", None, {"root", "alice", "bob"}),
    ("GET", "/api/projects/b/secrets", None, {"root", "carol"}),
    ("GET", "/api/projects/a/changes", None, {"root", "alice", "bob"}),
    ("PUT", "/api/projects/a/secrets/HF_TOKEN", {"value": "hf-1"}, {"root", "alice"}),
    ("PUT", "/api/projects/b/secrets/HF_TOKEN", {"value": "hf-1"}, {"root"}),
    ("DELETE", "/api/projects/a/secrets/KEPT", None, {"root", "alice"}),
    ("POST", "/api/projects/a/repo-credentials", {"url": "https://g.example/r", "value": "t"}, MANAGERS_OF_A),
    # volumes (docs/teams.md#volumes): members list them, managers create and delete them
    ("GET", "/api/projects/a/volumes", None, {"root", "alice", "bob"}),
    ("GET", "/api/projects/b/volumes", None, {"root", "carol"}),
    ("POST", "/api/projects/a/volumes", {"configuration": {"name": "data"}}, MANAGERS_OF_A),
    ("DELETE", "/api/projects/a/volumes/old", None, MANAGERS_OF_A),
    # fleets (docs/teams.md#fleets): what needs no Temporal here; tests/e2e/test_runs_by_role.py the rest
    ("GET", "/api/projects/a/fleets", None, {"root", "alice", "bob"}),
    ("GET", "/api/projects/b/fleets", None, {"root", "carol"}),
    ("POST", "/api/projects/a/fleet-plans", {"configuration": FLEET}, MANAGERS_OF_A),
]


def state(api: Api) -> tuple[object, ...]:
    """Everything a call could change."""
    store = api.store
    projects = store.list_projects()
    return (
        [(u.name, u.role, u.token_hash) for u in store.list_users()],
        [p.name for p in store.list_projects()],
        {p.name: [(m.user_name, m.role) for m in store.members(p.name)] for p in store.list_projects()},
        {p.name: [(s.name, s.sealed) for s in store.list_secrets(p.name)] for p in store.list_projects()},
        {p.name: [(c.actor, c.name, c.change) for c in store.list_changes(p.name)] for p in projects},
        {p.name: [(v.name, v.instance) for v in store.list_volumes(p.name)] for p in projects},
    )


@pytest.mark.parametrize(
    ("method", "path", "body", "allowed"), ROUTES, ids=[f"{m} {p}" for m, p, _, _ in ROUTES]
)
def test_each_route_allows_its_roles_and_refused_calls_change_nothing(
    api: Api, method: str, path: str, body: dict[str, Any] | None, allowed: set[str]
) -> None:
    before = state(api)
    for token, status in ((None, 401), ("not-a-token", 401)):
        with api.client(token=token) as http:
            answer = http.request(method, path, json=body)
        assert answer.status_code == status, answer.text
        assert answer.headers["WWW-Authenticate"] == "Bearer"
        assert set(answer.json()) == {"detail"}
    for user in sorted(ALL - allowed):
        with api.client(user) as http:
            answer = http.request(method, path, json=body)
        assert answer.status_code == 403, (user, answer.text)
        assert answer.json()["detail"].startswith(user), answer.text
    assert state(api) == before
    for user in sorted(allowed):
        with api.client(user) as http:
            answer = http.request(method, path, json=body)
        # The first allowed call does it; a second may find it done (409, 404) but is never refused.
        assert answer.status_code not in (401, 403), (user, answer.text)
        assert answer.status_code < 300 or user != sorted(allowed)[0], (user, answer.text)


def test_a_caller_sees_only_the_projects_they_belong_to(api: Api) -> None:
    def names(user: str) -> list[str]:
        with api.client(user) as http:
            return [project["name"] for project in http.get("/api/projects").json()]

    assert names("root") == ["a", "b", "main"]
    assert names("alice") == names("bob") == ["a"]
    assert names("carol") == ["b"]
    with api.client("carol") as http:
        answer = http.get("/api/projects/a/members")
    assert (answer.status_code, answer.json()) == (403, {"detail": "carol is not a member of project a"})


def test_a_revoked_token_is_refused_at_once_and_a_rotated_one_replaces_it(api: Api) -> None:
    with api.client("root") as root:
        assert root.delete("/api/users/bob/token").json()["has_token"] is False
    with api.client("bob") as bob:
        assert bob.get("/api/me").status_code == 401
    with api.client("root") as root:
        issued = root.post("/api/users/bob/token").json()
    assert api.store.get_user("bob").token_hash == token_hash(issued["token"])  # type: ignore[union-attr]
    with api.client(token=issued["token"]) as bob:
        assert bob.get("/api/me").json() == {"name": "bob", "role": "user", "projects": {"a": "user"}}
    with api.client("alice") as alice:  # her own, once more: the old one stops working
        fresh = alice.post("/api/users/alice/token").json()["token"]
        assert alice.get("/api/me").status_code == 401
    with api.client(token=fresh) as alice:
        assert alice.get("/api/me").status_code == 200


def test_the_last_admin_stays_and_a_project_that_holds_things_stays(api: Api) -> None:
    before = state(api)
    with api.client("root") as root:
        demoted = root.put("/api/users/root/role", json={"role": "user"})
        revoked = root.delete("/api/users/root/token")
        default = root.delete("/api/projects/main")
    assert (demoted.status_code, demoted.json()["detail"]) == (
        409,
        "root is the last global admin: make another user admin first",
    )
    assert revoked.status_code == 409
    assert default.json() == {"detail": "project main is every deployment's default: it stays"}
    assert state(api) == before
    with api.store.engine.begin() as connection:
        connection.exec_driver_sql(
            "INSERT INTO secrets (id, project, name, key_id, sealed, created_at, updated_at) "
            "VALUES ('b/X', 'b', 'X', 'k', x'00', 0, 0)"
        )
    with api.client("root") as root:
        held = root.delete("/api/projects/b")
    assert held.json() == {"detail": "project b still holds 1 secrets: delete them first (nothing is lost)"}


def test_bad_input_gets_one_line(api: Api) -> None:
    with api.client("root") as root:
        answer = root.post("/api/users", json={"name": "Not A Name"})
        unknown = root.put("/api/users/nobody/role", json={"role": "admin"})
        role = root.put("/api/projects/a/members/bob", json={"role": "owner"})
    assert answer.status_code == 422
    assert answer.json()["detail"] == (
        "name: invalid name 'Not A Name': use 1 to 64 lowercase letters, digits, '_', '.' and '-', "
        "starting with a letter"
    )
    assert (unknown.status_code, unknown.json()) == (404, {"detail": "no user nobody"})
    assert role.status_code == 422 and role.json()["detail"].startswith("role: Input should be")


def test_a_jobs_token_acts_as_its_user_but_cannot_rotate_their_token(api: Api) -> None:
    """docs/teams.md#a-jobs-token: a job's token is bob's in project a while its run is active; it may not
    take a token of bob's own, which would outlive the run."""
    now = time.time()
    run = RunRecord(
        id="job-run-1", project="a", run_name="job-run", user="bob", type="task", status="running",
        configuration="{}", code_hash="", submitted_at=now, updated_at=now, workflow_id="main/job-run",
    )  # fmt: skip
    api.store.put_run(run)
    api.store.put_run_token(token_hash("job-token"), run.id, "a", "bob")
    try:
        with api.client(token="job-token") as job:
            me = job.get("/api/me")
            assert (me.status_code, me.json()["name"], me.json()["projects"]) == (200, "bob", {"a": "user"})
            rotated = job.post("/api/users/bob/token")
            assert rotated.status_code == 403
            assert (
                rotated.json()["detail"] == "a job's token cannot rotate bob's token (it is run job-run-1's)"
            )
        assert api.store.get_user("bob").token_hash == token_hash("bob-token")  # type: ignore[union-attr]
        with api.client("bob") as bob:
            assert bob.get("/api/me").status_code == 200
    finally:  # what the module's other tests must not find in project a
        with api.store.engine.begin() as connection:
            connection.exec_driver_sql("DELETE FROM run_tokens")
            connection.exec_driver_sql("DELETE FROM runs WHERE id = 'job-run-1'")
