"""`ferry attach` through Ferry's API as a project's member (docs/teams.md#attach), on the embedded stack:
alice, a user of `a` with her own FERRY_HOME (so her own SSH key), applies a dev environment there and is
attached as `ferry apply` attaches, then by `ferry attach`; her own OpenSSH runs a command in the job. bob, no
member of `a`, is refused in one line with exit code 5 (DENIED). An operator's CLI (Temporal's address, no
login) attaches over the store and Temporal itself (cli/ssh_routes.py `DirectRoutes`)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from cli import exit_codes
from tests.e2e.conftest import SMALL, Ferry, last_line
from tests.e2e.test_attach import _read_until, _ssh
from tests.e2e.test_runs_by_role import as_user, users  # noqa: F401 (the fixture, by name)


def _attached(ferry: Ferry, env: dict[str, str], run: str, *args: str) -> None:
    """`ferry ARGS` until it says it is attached to `run`; `ssh <run>` with the config it wrote in the
    caller's FERRY_HOME reaches the job with the key there; Ctrl-C detaches, the run goes on."""
    attaching = subprocess.Popen(
        [*ferry.command, *args],
        cwd=ferry.cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _read_until(attaching, f"attached to run {run}", limit=120)
        config = Path(env["FERRY_HOME"]) / "ssh" / "config"
        said = _ssh(config, run, "echo hi from $FERRY_RUN_NAME")
        assert (said.returncode, said.stdout) == (0, f"hi from {run}\n"), said.stderr
        settings = dict(line.split(" ", 1) for line in _ssh(config, "-G", run).stdout.splitlines())
        assert settings["identityfile"] == str(Path(env["FERRY_HOME"]) / "ssh" / "id_ed25519")
    finally:
        attaching.send_signal(signal.SIGINT)
        out = attaching.communicate(timeout=30)[1]
    assert attaching.returncode == 0, out
    assert f"detached: run {run} goes on" in out


def test_a_member_attaches_through_the_api_and_an_outsider_is_refused(
    ferry: Ferry,
    users: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    alice = {
        **ferry.env,
        **as_user(ferry, users, "alice", "a"),
        "FERRY_HOME": str(tmp_path / "alice-home"),
    }
    config = tmp_path / "dev.yml"
    config.write_text("type: dev-environment\nname: dev\nide: vscode\n" + SMALL)
    try:
        _attached(ferry, alice, "dev", "apply", "-y", "-f", str(config))  # as dstack's apply attaches
        _attached(ferry, alice, "dev", "attach", "dev", "--no-logs")
        refused = ferry("attach", "dev", env=as_user(ferry, users, "bob", "a"))
        assert refused.returncode == exit_codes.DENIED, refused.stderr
        assert last_line(refused.stderr) == "ferry attach: bob is not a member of project a"
    finally:
        ferry("stop", "-y", "-x", "dev", env=alice, timeout=120)


def test_an_operators_cli_attaches_over_the_store_and_temporal(ferry: Ferry, tmp_path: Path) -> None:
    assert ferry("ps", timeout=120).returncode == 0  # the stack started, run alone too
    port = json.loads((ferry.home / "stack" / "stack.json").read_text())["port"]
    operator = {**ferry.env, "FERRY_TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}
    config = tmp_path / "ops.yml"
    config.write_text("type: dev-environment\nname: ops\nide: vscode\n" + SMALL)
    try:
        assert ferry("apply", "-y", "-d", "-f", str(config), env=operator, timeout=120).returncode == 0
        _attached(ferry, operator, "ops", "attach", "ops", "--no-logs")
    finally:
        ferry("stop", "-y", "-x", "ops", env=operator, timeout=120)
