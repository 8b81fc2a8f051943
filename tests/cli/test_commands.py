"""The command line's shape without a server: usage errors in one line, overrides, connection errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.apply import with_overrides
from cli.errors import CommandError, connect_problem
from cli.main import app
from core.configuration import TaskConfiguration, parse_configuration

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["apply"], "ferry apply: missing option '-f' / '--file' (see ferry apply --help)"),
        (["ps", "--bogus"], "ferry ps: no such option: --bogus (see ferry ps --help)"),
        (
            ["server", "status", "--bogus"],
            "ferry server status: no such option: --bogus (see ferry server status --help)",
        ),
        (["aply"], "ferry: no such command 'aply'. Did you mean 'apply'? (see ferry --help)"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(args: list[str], line: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.output == line + "\n"


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("apply", "ps", "logs", "stop", "events", "wait", "server", "validate", "worker"):
        assert command in result.output


def configuration() -> TaskConfiguration:
    conf = parse_configuration(
        {"type": "task", "name": "x1", "commands": ["true"], "env": {"A": "1", "B": "2"}}
    )
    assert isinstance(conf, TaskConfiguration)
    return conf


def test_overrides() -> None:
    conf = with_overrides(configuration(), name="other", env=["B=3", "C=", "D"])
    assert conf.name == "other"
    assert conf.env == {"A": "1", "B": "3", "C": "", "D": None}
    assert with_overrides(configuration(), name=None, env=[]) == configuration()


@pytest.mark.parametrize(
    ("name", "env", "message"),
    [
        ("Upper", [], "-n: invalid name 'Upper'"),
        (None, ["=1"], "-e '=1': expected KEY=VALUE or KEY"),
        (None, ["A-B=1"], "-e 'A-B=1': expected KEY=VALUE or KEY"),
    ],
)
def test_bad_overrides(name: str | None, env: list[str], message: str) -> None:
    with pytest.raises(CommandError) as caught:
        with_overrides(configuration(), name=name, env=env)
    assert str(caught.value).startswith(message)
    assert caught.value.exit_code == 2


def test_connect_problem_in_a_few_words() -> None:
    refused = (
        "Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError("
        'ConnectError("tcp connect error", 127.0.0.1:1, Os { code: 111, kind: ConnectionRefused, '
        'message: "Connection refused" })))'
    )
    assert (
        connect_problem("127.0.0.1:1", refused)
        == "cannot reach the Temporal server at 127.0.0.1:1: Connection refused"
    )
    assert (
        connect_problem("h:1", "Failed client connect: odd") == "cannot reach the Temporal server at h:1: odd"
    )


def test_server_status_says_a_login_sends_the_run_commands_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ferry server` is this machine's stack (docs/teams.md#this-machines-stack): logged in, it says the
    run commands go to the server's API instead; nothing is started or asked of that API."""
    monkeypatch.setenv("FERRY_HOME", str(tmp_path))
    monkeypatch.setenv("FERRY_API_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("FERRY_TOKEN", "a-token")
    monkeypatch.delenv("FERRY_TEMPORAL_ADDRESS", raising=False)
    result = CliRunner().invoke(app, ["server", "status"])
    assert result.exit_code == 3, result.output  # not running here
    assert "not running" in result.output
    assert "note: logged in to http://127.0.0.1:1, so run commands use that server's API" in result.output
