"""`ferry login`, `ferry user`, `ferry project` and `ferry member` against the real API process
(cli/teams.py, docs/teams.md): what each prints, the login kept for its owner only, and a refusal as one
line with exit code 5 (DENIED)."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner, Result

from cli import exit_codes
from cli.main import app
from core.services.replicas import token_hash
from store.engine import make_engine
from store.repository import Store
from tests.api.conftest import TOKENS, Api

runner = CliRunner()


def ferry(home: Path, *args: str, stdin: str | None = None, **env: str) -> Result:
    base = {
        "FERRY_HOME": str(home),
        "FERRY_API_URL": "",
        "FERRY_TOKEN": "",
        "FERRY_PROJECT": "",
        "COLUMNS": "",
        # Not the embedded stack, whose API the CLI would call without a login (tests/e2e/test_server.py).
        "FERRY_TEMPORAL_ADDRESS": "127.0.0.1:1",
    }
    return runner.invoke(app, list(args), input=stdin, env={**base, **env})


def as_user(api: Api, user: str) -> dict[str, str]:
    return {"FERRY_API_URL": api.url, "FERRY_TOKEN": TOKENS[user]}


def test_login_keeps_the_url_and_token_for_its_owner_only(api: Api, tmp_path: Path) -> None:
    assert ferry(tmp_path, "user", "list").exit_code == exit_codes.DENIED  # not logged in yet
    logged = ferry(tmp_path, "login", api.url, stdin=TOKENS["root"] + "\n")
    assert logged.exit_code == 0, logged.output
    assert f"logged in to {api.url} as root (admin)" in logged.output
    kept = tmp_path / "login.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert json.loads(kept.read_text()) == {"url": api.url, "token": TOKENS["root"]}
    listed = ferry(tmp_path, "user", "list", "--json")
    assert [user["name"] for user in json.loads(listed.stdout)] == ["alice", "bob", "carol", "root"]
    wrong = ferry(tmp_path / "other", "login", api.url, stdin="not-a-token\n")
    assert wrong.exit_code == exit_codes.DENIED
    assert "ferry login: the token is not valid: unknown or revoked" in wrong.output
    assert not (tmp_path / "other" / "login.json").exists()


def test_an_admin_adds_a_user_whose_token_then_works_and_revokes_it(api: Api, tmp_path: Path) -> None:
    added = ferry(tmp_path, "user", "add", "dave", **as_user(api, "root"))
    assert added.exit_code == 0, added.output
    token = added.stdout.strip()
    assert (
        ferry(tmp_path, "project", "list", FERRY_API_URL=api.url, FERRY_TOKEN=token).stdout
        == "NAME  CREATED BY\n"
    )
    assert ferry(tmp_path, "member", "set", "dave", "user", "-p", "a", **as_user(api, "alice")).exit_code == 0
    projects = ferry(tmp_path, "project", "list", "--json", FERRY_API_URL=api.url, FERRY_TOKEN=token)
    assert [project["name"] for project in json.loads(projects.stdout)] == ["a"]
    assert ferry(tmp_path, "user", "revoke", "dave", **as_user(api, "root")).exit_code == 0
    refused = ferry(tmp_path, "project", "list", FERRY_API_URL=api.url, FERRY_TOKEN=token)
    assert refused.exit_code == exit_codes.DENIED


def test_a_refusal_is_one_line_and_exit_code_5(api: Api, tmp_path: Path) -> None:
    refused = ferry(tmp_path, "user", "add", "eve", **as_user(api, "bob"))
    assert refused.exit_code == exit_codes.DENIED
    assert refused.output == "ferry user add: bob may not manage users: it takes the global admin role\n"
    member = ferry(tmp_path, "member", "remove", "alice", **as_user(api, "bob"), FERRY_PROJECT="a")
    assert member.output == (
        "ferry member remove: bob may not manage members in project a: "
        "it takes the manager role (theirs: user)\n"
    )
    missing = ferry(tmp_path, "project", "delete", "nowhere", **as_user(api, "root"))
    assert (missing.exit_code, missing.output) == (
        exit_codes.NOT_FOUND,
        "ferry project delete: no project nowhere\n",
    )
    listed = ferry(tmp_path, "member", "list", "-p", "a", **as_user(api, "bob"))
    assert listed.stdout == "USER   ROLE\nalice  manager\nbob    user\n"


def test_rotating_your_own_token_keeps_the_new_one(api: Api, tmp_path: Path) -> None:
    assert ferry(tmp_path, "login", api.url, stdin=TOKENS["carol"]).exit_code == 0
    rotated = ferry(tmp_path, "user", "rotate", "carol")
    assert rotated.exit_code == 0, rotated.output
    fresh = rotated.stdout.strip()
    assert json.loads((tmp_path / "login.json").read_text())["token"] == fresh
    assert ferry(tmp_path, "project", "list").stdout == "NAME  CREATED BY\nb     root\n"


def test_a_deployments_first_admin_is_made_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    command = [sys.executable, "-m", "api", "--database-url", url, "first-admin", "root"]
    made = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    engine = make_engine(url)
    try:
        caller = Store(engine).caller_for_token_hash(token_hash(token))
        assert caller is not None and (caller.name, caller.role) == ("root", "admin")
    finally:
        engine.dispose()
    again = subprocess.run([*command[:-1], "eve"], capture_output=True, text=True, timeout=120)
    assert (again.returncode, again.stderr) == (
        2,
        "python -m api first-admin: the store has an admin already (root)\n",
    )
