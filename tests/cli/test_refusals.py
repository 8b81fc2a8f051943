"""A configuration Ferry cannot run is refused in one line by `ferry validate`, `ferry apply` and
FerryAPI.submit, before anything is submitted; what it does not act on is named in the warning line."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest
from typer.testing import CliRunner

from cli.api import FerryAPI
from cli.context import Context
from cli.main import app
from core.configuration import parse_configuration
from core.configuration.loading import ConfigurationError

runner = CliRunner()

BLANK_COMMANDS = "type: task\nname: bad\ncommands: ['  ']\n"  # blank commands: nothing to run
NOTHING_TO_RUN = "commands: nothing to run: every command is blank"


@pytest.fixture
def no_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing may start the stack or reach a server: a refusal comes first."""

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a refused configuration reached the stack")

    monkeypatch.setenv("FERRY_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(Context, "prepare_stack", forbidden)
    monkeypatch.setattr(Context, "api", forbidden)


def test_validate_refuses_blank_commands(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(BLANK_COMMANDS)
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"{bad}:3: {NOTHING_TO_RUN}"]
    assert result.stdout == ""


def test_validate_refuses_a_fleet_of_nodes_among_good_files(tmp_path: Path) -> None:
    bad = tmp_path / "cloud.yml"
    bad.write_text("type: fleet\nname: cloud\nnodes: 2\n")
    good = tmp_path / "ok.yml"
    good.write_text("type: task\ncommands: [echo hi]\n")
    result = runner.invoke(app, ["validate", str(good), str(bad)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{bad}:3: nodes: Ferry cannot create instances yet (it has no cloud backend): "
        "a fleet needs `ssh_config` with the hosts to use"
    ]
    assert str(good) in result.stdout and str(bad) not in result.stdout


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        ("", None),
        ("auth: true\n", None),
        ("gateway: gw\nrate_limits: [{rps: 1}]\n", "gateway, https, rate_limits"),
    ],
)
def test_validate_names_the_service_fields_not_acted_on(tmp_path: Path, extra: str, line: str | None) -> None:
    config = tmp_path / "web.yml"
    config.write_text("type: service\nport: 8000\ncommands: [serve]\n" + extra)
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 0
    expected = [] if line is None else [f"{config}: warning: Ferry does not act on yet: {line}"]
    assert result.stderr.splitlines() == expected


@pytest.mark.usefixtures("no_stack")
def test_apply_refuses_before_the_plan(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(BLANK_COMMANDS)
    result = runner.invoke(app, ["apply", "-y", "-f", str(bad)])
    assert result.exit_code == 2
    assert result.output.splitlines() == [f"ferry apply: {bad}:3: {NOTHING_TO_RUN}"]


@pytest.mark.usefixtures("no_stack")
def test_apply_refuses_a_fleet_of_nodes(tmp_path: Path) -> None:
    bad = tmp_path / "cloud.yml"
    bad.write_text("type: fleet\nname: cloud\nnodes: 0..2\n")
    result = runner.invoke(app, ["apply", "-y", "-f", str(bad)])
    assert result.exit_code == 2
    assert len(result.output.splitlines()) == 1
    assert result.output.startswith(f"ferry apply: {bad}:3: nodes: Ferry cannot create instances yet")


def test_the_api_refuses_before_touching_the_store(tmp_path: Path) -> None:
    # No client and no store: the refusal must come before either is used.
    api = FerryAPI(cast(Any, None), cast(Any, None))
    configuration = parse_configuration({"type": "task", "commands": ["  "]})
    with pytest.raises(ConfigurationError) as caught:
        asyncio.run(api.submit(cast(Any, configuration), repo_dir=tmp_path, run_name="bad"))
    assert str(caught.value) == f"run bad: {NOTHING_TO_RUN}"
