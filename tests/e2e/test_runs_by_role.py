"""Runs through Ferry's API as different users (docs/teams.md#runs), on the embedded stack: the home's user
is its admin and makes two projects, alice a user of `a` and bob a user of `b`. Each command reaches the
API with the user's token (FERRY_API_URL, FERRY_TOKEN) and FERRY_PROJECT, as a teammate's CLI would; a
refused one says why in one line, exits 5 (DENIED) and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from cli import exit_codes
from tests.e2e.conftest import FERRY, SMALL, Ferry, last_line, task


@pytest.fixture(scope="module")
def users(ferry: Ferry) -> dict[str, str]:
    """Each user's token; the projects and members made by the admin."""
    tokens = {}
    for name in ("alice", "bob"):
        added = ferry("user", "add", name)
        assert added.returncode == 0, added.stderr
        tokens[name] = added.stdout.strip()
    for project, member in (("a", "alice"), ("b", "bob")):
        assert ferry("project", "add", project).returncode == 0
        made = ferry("member", "set", member, "user", "-p", project)
        assert made.returncode == 0, made.stderr
    return tokens


def as_user(ferry: Ferry, users: dict[str, str], user: str, project: str) -> dict[str, str]:
    state = json.loads((ferry.home / "stack" / "stack.json").read_text())
    return {
        "FERRY_API_URL": f"http://127.0.0.1:{state['api_port']}",
        "FERRY_TOKEN": users[user],
        "FERRY_PROJECT": project,
    }


def test_a_member_runs_in_their_project_and_no_one_else_reaches_the_run(
    ferry: Ferry, users: dict[str, str], tmp_path: Path
) -> None:
    alice = as_user(ferry, users, "alice", "a")
    config = task(tmp_path, "greet", "echo hello from $FERRY_RUN_NAME")
    applied = ferry("apply", "-f", config, "-y", env=alice, timeout=120)
    assert applied.returncode == 0, applied.stderr
    assert "hello from greet" in applied.stdout
    logs = ferry("logs", "greet", env=alice)
    assert (logs.returncode, logs.stdout) == (0, "hello from greet\n"), logs.stderr
    events = ferry("events", "greet", "--json", env=alice)
    assert events.returncode == 0, events.stderr
    assert [json.loads(line)["name"] for line in events.stdout.splitlines()][-1] == "clean"

    # bob is no member of `a`: every run command refuses him there, in one line, with exit code 5.
    bob_in_a = as_user(ferry, users, "bob", "a")
    for args in (
        ("logs", "greet"),
        ("events", "greet"),
        ("stop", "-y", "greet"),
        ("apply", "-f", config, "-y"),
    ):
        refused = ferry(*args, env=bob_in_a, timeout=120)
        assert refused.returncode == exit_codes.DENIED, (args, refused.stdout, refused.stderr)
        assert last_line(refused.stderr) == f"ferry {args[0]}: bob is not a member of project a", args
    # In his own project, alice's run does not exist.
    bob_in_b = as_user(ferry, users, "bob", "b")
    missing = ferry("logs", "greet", env=bob_in_b)
    assert missing.returncode == exit_codes.NOT_FOUND, missing.stderr
    assert "no run named 'greet' in project 'b'" in missing.stderr
    # Nothing bob tried was submitted: `a` has alice's one run, `b` none.
    events_after = ferry("events", "greet", "--json", env=alice)
    assert events_after.stdout == events.stdout


def test_the_run_is_recorded_as_its_callers_whatever_the_client_says(
    ferry: Ferry, users: dict[str, str], tmp_path: Path
) -> None:
    bob = {**as_user(ferry, users, "bob", "b"), "FERRY_USER": "alice", "USER": "alice"}
    config = task(tmp_path, "mine", "true")
    applied = ferry("apply", "-f", config, "-y", env=bob, timeout=120)
    assert applied.returncode == 0, applied.stderr
    from store.opening import open_store

    store = open_store(f"sqlite:///{ferry.home / 'ferry.db'}")
    try:
        record = store.find_run("b", "mine")
        assert record is not None and record.user == "bob"
        greet = store.find_run("a", "greet")
        assert greet is None or greet.user == "alice"
    finally:
        store.engine.dispose()


def test_a_stop_records_who_asked_for_it(ferry: Ferry, users: dict[str, str], tmp_path: Path) -> None:
    bob = {**as_user(ferry, users, "bob", "b"), "FERRY_USER": "alice"}
    config = task(tmp_path, "sleepy", "sleep 300")
    assert ferry("apply", "-f", config, "-y", "-d", env=bob, timeout=120).returncode == 0
    stopped = ferry("stop", "-y", "sleepy", env=bob, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    events = [json.loads(line) for line in ferry("events", "sleepy", "--json", env=bob).stdout.splitlines()]
    [terminating] = [
        e["context"] for e in events if e["name"] == "status" and e["context"]["status"] == "terminating"
    ]
    assert (terminating["reason"], terminating["by"]) == ("stopped_by_user", "bob")


def test_a_job_with_dstack_true_submits_a_run_and_waits_for_it(
    ferry: Ferry, users: dict[str, str], tmp_path: Path
) -> None:
    """docs/teams.md#a-jobs-token: the job's `ferry apply` runs as its run's user, in its project."""
    (tmp_path / "inner.yml").write_text(f"type: task\nname: inner\ncommands: [echo inner ran]\n{SMALL}")
    outer = task(tmp_path, "outer", f"{FERRY[0]} apply -f inner.yml -y", extra="dstack: true\n")
    alice = as_user(ferry, users, "alice", "a")
    applied = ferry("apply", "-f", outer, "-y", env=alice, timeout=240)
    assert applied.returncode == 0, (applied.stdout, applied.stderr)
    assert "inner ran" in applied.stdout
    logs = ferry("logs", "inner", env=alice)
    assert (logs.returncode, logs.stdout) == (0, "inner ran\n"), logs.stderr
    from store.opening import open_store

    store = open_store(f"sqlite:///{ferry.home / 'ferry.db'}")
    try:
        inner = store.find_run("a", "inner")
        assert inner is not None and inner.user == "alice"  # the job's run's user, in its project
        # Its token opened the API while the job ran; its run has ended: it opens nothing now.
        [token] = store.engine.connect().execute(sa.text("select token_hash from run_tokens")).scalars().all()
        assert store.caller_for_token_hash(token) is None
    finally:
        store.engine.dispose()


def test_a_teammates_cli_holds_neither_the_codec_key_nor_temporals_address(
    ferry: Ferry, users: dict[str, str], tmp_path: Path
) -> None:
    """docs/teams.md#one-way-in: alice's own FERRY_HOME, logged in by the variables, runs the run commands;
    nothing in it or in the command's environment is the stack's key, store or Temporal address."""
    home = tmp_path / "alice-home"
    alice = {**as_user(ferry, users, "alice", "a"), "FERRY_HOME": str(home)}
    config = task(tmp_path, "hers", "echo from her home")
    applied = ferry("apply", "-f", config, "-y", env=alice, timeout=120)
    assert applied.returncode == 0, applied.stderr
    for args in (("ps", "-a"), ("logs", "hers"), ("events", "hers"), ("wait", "hers")):
        assert ferry(*args, env=alice).returncode == 0, args
    state = json.loads((ferry.home / "stack" / "stack.json").read_text())
    key = (ferry.home / "codec.key").read_bytes().strip()
    assert not any(name.startswith(("FERRY_TEMPORAL", "TEMPORAL_")) for name in {**ferry.env, **alice})
    made = sorted(str(path.relative_to(home)) for path in home.rglob("*") if path.is_file())
    assert not any(name in made for name in ("codec.key", "ferry.db", "stack/stack.json")), made
    for path in home.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert key not in data and f":{state['port']}".encode() not in data, path


def test_a_revoked_token_is_refused_at_once(ferry: Ferry, users: dict[str, str]) -> None:
    bob = as_user(ferry, users, "bob", "b")
    assert ferry("logs", "mine", env=bob).returncode == 0
    assert ferry("user", "revoke", "bob").returncode == 0
    refused = ferry("logs", "mine", env=bob)
    assert refused.returncode == exit_codes.DENIED, refused.stderr
    assert "the token is not valid" in last_line(refused.stderr)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["logs", "no-such-run"],
            "ferry logs: no run named 'no-such-run' in project 'main' (see ferry ps -a)",
        ),
        (
            ["events", "no-such-run"],
            "ferry events: no run named 'no-such-run' in project 'main' (see ferry ps -a)",
        ),
        (
            ["stop", "-y", "no-such-run"],
            "ferry stop: no run named 'no-such-run' in project 'main' (see ferry ps -a)",
        ),
        (
            ["wait", "no-such-run"],
            "ferry wait: no run named 'no-such-run' in project 'main' (see ferry ps -a)",
        ),
    ],
)
def test_a_run_that_is_not_there_is_one_line_and_exit_code_3(
    ferry: Ferry, args: list[str], expected: str
) -> None:
    result = ferry(*args)
    assert (result.returncode, result.stderr) == (exit_codes.NOT_FOUND, expected + "\n")


def test_fleets_volumes_and_secrets_by_role(ferry: Ferry, users: dict[str, str], tmp_path: Path) -> None:
    """docs/teams.md#fleets, #volumes, #secrets: the admin applies and deletes a fleet in `a`, each kept with
    its actor; alice, a user of `a`, lists them and may change none, and reaches none of `b`'s (bob's token
    may be revoked by now)."""
    fleet = tmp_path / "fleet.yml"
    fleet.write_text("type: fleet\nname: far\nssh_config:\n  user: nobody\n  hosts: ['127.0.0.1:9']\n")
    # Followed through the API until its deployment has ended: its one host cannot be reached (exit 1).
    applied = ferry("apply", "-f", str(fleet), "-y", "-p", "a", timeout=180)
    assert applied.returncode == 1, applied.stderr
    assert "fleet far created (1 host(s))" in applied.stderr
    assert last_line(applied.stderr).startswith("far-0: not deployed (tried again every few seconds): ")

    alice = as_user(ferry, users, "alice", "a")
    here = task(tmp_path, "here", "true", extra="fleets: [local]\n")
    offered = ferry("offer", "-f", here, "--json", env=alice, timeout=120)
    assert offered.returncode == 0, offered.stderr
    assert json.loads(offered.stdout)["fleet"] == "local"
    listed = ferry("fleet", "list", "--json", env=alice)
    assert listed.returncode == 0, listed.stderr
    assert "far" in [f["name"] for f in json.loads(listed.stdout)]
    manage = (
        "may not manage fleets, volumes and backends in project a: it takes the manager role (theirs: user)"
    )
    members: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("fleet delete", ("fleet", "delete", "-y", "far")),
        ("apply", ("apply", "-f", str(fleet), "-y", "-d")),
        ("volume create", ("volume", "create", "data")),
    )
    for command, args in members:
        refused = ferry(*args, env=alice, timeout=120)
        assert refused.returncode == exit_codes.DENIED, (args, refused.stderr)
        assert last_line(refused.stderr) == f"ferry {command}: alice {manage}"
    secret = ferry("secret", "delete", "-y", "HF_TOKEN", env=alice)
    assert secret.returncode == exit_codes.DENIED, secret.stderr
    alice_in_b = as_user(ferry, users, "alice", "b")
    outsiders: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("fleet list", ("fleet", "list")),
        ("volume list", ("volume", "list")),
        ("secret list", ("secret", "list")),
        ("set-priority", ("set-priority", "mine", "50")),
        ("offer", ("offer", "-f", str(task(tmp_path, "where", "true")))),
    )
    for command, args in outsiders:
        refused = ferry(*args, env=alice_in_b)
        assert refused.returncode == exit_codes.DENIED, (args, refused.stderr)
        assert last_line(refused.stderr) == f"ferry {command}: alice is not a member of project b"

    deleted = ferry("fleet", "delete", "-y", "far", "-p", "a", timeout=180)
    assert deleted.returncode == 0, deleted.stderr
    assert last_line(deleted.stderr).startswith("fleet far ")
    from store.opening import open_store

    store = open_store(f"sqlite:///{ferry.home / 'ferry.db'}")
    try:
        [admin] = [user.name for user in store.list_users() if user.role == "admin"]
        changes = [(c.actor, c.subject, c.name, c.change) for c in store.list_changes("a")]
        assert changes == [(admin, "fleet", "far", "created"), (admin, "fleet", "far", "deleted")]
    finally:
        store.engine.dispose()
