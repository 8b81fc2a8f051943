"""Pipelines through Ferry's API as different users (docs/teams.md#pipelines), on the embedded stack, with
the users of tests/e2e/test_runs_by_role.py: alice a user of `a`, bob a user of `b`. Each command reaches
the API with the user's token (FERRY_API_URL, FERRY_TOKEN) and FERRY_PROJECT, from the user's own
FERRY_HOME, as a teammate's CLI would."""

from __future__ import annotations

import json
from pathlib import Path

from cli import exit_codes
from store.opening import open_store
from tests.e2e.conftest import SMALL, Ferry, last_line
from tests.e2e.test_runs_by_role import as_user, users  # noqa: F401 (users: the module's fixture)

TWO_TASKS = f"""name: twostep
---
type: task
name: first
commands: ["echo one from $GREETING"]
env: [GREETING]
{SMALL}---
type: task
name: second
commands: ["echo two"]
{SMALL}"""


def test_a_member_applies_a_pipeline_as_herself_and_an_outsider_is_refused(
    ferry: Ferry,
    users: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    path = tmp_path / "twostep.yml"
    path.write_text(TWO_TASKS)
    home = tmp_path / "alice-home"
    # GREETING is set where alice applies, not in the API's environment: her tasks get it from her.
    alice = {**as_user(ferry, users, "alice", "a"), "FERRY_HOME": str(home), "GREETING": "alice's shell"}
    applied = ferry("apply", "-f", str(path), "-y", env=alice, timeout=240)
    assert applied.returncode == 0, (applied.stdout, applied.stderr)
    assert "run twostep: done (task 2 of 2: all jobs done)" in applied.stderr, applied.stderr
    for task, said in ((1, "one from alice's shell\n"), (2, "two\n")):
        logs = ferry("logs", "twostep", "--task", str(task), env=alice)
        assert (logs.returncode, logs.stdout) == (0, said), logs.stderr

    # bob is no member of `a`: refused in one line, exit code 5, and nothing is submitted.
    bob_in_a = {**as_user(ferry, users, "bob", "a"), "GREETING": "bob's shell"}
    refused = ferry("apply", "-f", str(path), "-y", "-n", "bobs", env=bob_in_a, timeout=120)
    assert refused.returncode == exit_codes.DENIED, (refused.stdout, refused.stderr)
    assert last_line(refused.stderr) == "ferry apply: bob is not a member of project a"
    # What a pipeline cannot be is the API's refusal, in the words the CLI said it in before.
    (tmp_path / "data.txt").write_text("data\n")
    with_files = TWO_TASKS.replace("name: second\n", "name: second\nfiles: [data.txt]\n")
    (tmp_path / "with-files.yml").write_text(with_files)
    files = ferry(
        "apply", "-f", str(tmp_path / "with-files.yml"), "-y", "-n", "files", env=alice, timeout=120
    )
    assert files.returncode == exit_codes.USAGE, (files.stdout, files.stderr)
    assert last_line(files.stderr) == (
        "ferry apply: run files task 2: pipeline tasks take no `repos` or `files` yet"
    )

    store = open_store(f"sqlite:///{ferry.home / 'ferry.db'}")
    try:
        runs = store.list_runs("a", False, 100)
        assert [(r.run_name, r.type, r.user) for r in runs] == [("twostep", "pipeline", "alice")]
        assert [t.user for t in store.list_pipeline_tasks(runs[0].id)] == ["alice", "alice"]
    finally:
        store.engine.dispose()
    # Her CLI held neither the stack's store nor its codec key nor Temporal's address.
    made = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
    assert not any(name in made for name in ("codec.key", "ferry.db", "stack/stack.json")), made


def test_an_operators_cli_applies_a_pipeline_itself(ferry: Ferry, tmp_path: Path) -> None:
    """docs/teams.md#one-way-in: Temporal's address and the stack's home, no login: as FERRY_USER."""
    path = tmp_path / "direct.yml"
    path.write_text(TWO_TASKS.replace("name: twostep", "name: direct"))
    state = json.loads((ferry.home / "stack" / "stack.json").read_text())
    operator = {
        "FERRY_TEMPORAL_ADDRESS": f"127.0.0.1:{state['port']}",
        "FERRY_PROJECT": "a",
        "GREETING": "ops",
    }
    applied = ferry("apply", "-f", str(path), "-y", env=operator, timeout=240)
    assert applied.returncode == 0, (applied.stdout, applied.stderr)
    assert "run direct: done (task 2 of 2: all jobs done)" in applied.stderr, applied.stderr
    logs = ferry("logs", "direct", "--task", "1", env=operator)
    assert (logs.returncode, logs.stdout) == (0, "one from ops\n"), logs.stderr
    store = open_store(f"sqlite:///{ferry.home / 'ferry.db'}")
    try:
        record = store.find_run("a", "direct")
        assert record is not None and record.user == "tester"  # FERRY_USER (tests/e2e/conftest.py)
    finally:
        store.engine.dispose()


def test_the_stacks_own_user_applies_a_pipeline_without_a_login(ferry: Ferry, tmp_path: Path) -> None:
    """docs/teams.md#one-way-in: no login, no Temporal address: through the stack's API, as its admin."""
    path = tmp_path / "own.yml"
    path.write_text(TWO_TASKS.replace("name: twostep", "name: own"))
    applied = ferry("apply", "-f", str(path), "-y", env={"GREETING": "home"}, timeout=240)
    assert applied.returncode == 0, (applied.stdout, applied.stderr)
    assert "run own: done (task 2 of 2: all jobs done)" in applied.stderr, applied.stderr
    assert "one from home" in applied.stdout
