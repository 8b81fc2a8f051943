"""`ferry token` of a logged-in user against the real API process (docs/teams.md#your-token): the token they
are logged in with, printed without a store; `--rotate` through the API, the old token refused at once,
the new one kept where the login came from. The CLI runs as a teammate's would: its own FERRY_HOME, no
Temporal address, no store and no key of Ferry's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli import exit_codes
from store.keys import ENV_KEYS
from tests.api.conftest import TOKENS, Api
from tests.api.test_cli_secrets import ROOT


def ferry(home: Path, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_", "TEMPORAL_"))}
    assert ENV_KEYS not in base
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        input=stdin, env={**base, "FERRY_HOME": str(home), **env}, cwd=ROOT,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def opens(api: Api, token: str) -> int:
    with api.client(token=token) as http:
        return http.get("/api/me").status_code


def made_in(home: Path) -> list[str]:
    return sorted(str(path.relative_to(home)) for path in home.rglob("*") if path.is_file())


def test_a_login_kept_in_its_file_prints_its_token_and_keeps_the_rotated_one(
    api: Api, tmp_path: Path
) -> None:
    home = tmp_path / "alice-home"
    logged = ferry(home, "login", api.url, stdin=TOKENS["alice"] + "\n")
    assert logged.returncode == 0, logged.stderr
    shown = ferry(home, "token")
    assert (shown.returncode, shown.stdout, shown.stderr) == (0, TOKENS["alice"] + "\n", "")

    rotated = ferry(home, "token", "--rotate")
    assert (rotated.returncode, rotated.stderr) == (0, ""), rotated.stderr
    fresh = rotated.stdout.strip()
    assert fresh and fresh != TOKENS["alice"]
    assert (opens(api, TOKENS["alice"]), opens(api, fresh)) == (401, 200)
    assert json.loads((home / "login.json").read_text()) == {"url": api.url, "token": fresh}
    assert ferry(home, "token").stdout == fresh + "\n"
    assert made_in(home) == ["login.json"]  # no store, no key, no stack: only the login


def test_a_login_by_the_variables_is_rotated_and_told_to_set_the_new_one(api: Api, tmp_path: Path) -> None:
    home = tmp_path / "carol-home"
    carol = {"FERRY_API_URL": api.url, "FERRY_TOKEN": TOKENS["carol"]}
    shown = ferry(home, "token", **carol)
    assert (shown.returncode, shown.stdout) == (0, TOKENS["carol"] + "\n"), shown.stderr

    rotated = ferry(home, "token", "--rotate", **carol)
    assert rotated.returncode == 0, rotated.stderr
    fresh = rotated.stdout.strip()
    assert rotated.stderr == (
        "FERRY_TOKEN still holds the old token, which no longer works: set FERRY_TOKEN to the new one\n"
    )
    assert (opens(api, TOKENS["carol"]), opens(api, fresh)) == (401, 200)
    assert opens(api, TOKENS["bob"]) == 200  # only carol's token changed
    stale = ferry(home, "token", "--rotate", **carol)  # the variable still holds the old one
    assert (stale.returncode, stale.stdout) == (exit_codes.DENIED, "")
    assert stale.stderr == (
        "ferry token: the token is not valid: unknown or revoked (ask an admin for a new one)\n"
    )
    assert made_in(home) == []  # nothing kept: the variables are the login
