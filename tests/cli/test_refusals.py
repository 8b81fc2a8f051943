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


def test_validate_accepts_a_fleet_of_nodes_and_names_what_it_does_not_act_on(tmp_path: Path) -> None:
    fleet = tmp_path / "cloud.yml"
    fleet.write_text("type: fleet\nname: cloud\nnodes: 0..2\nidle_duration: 5m\nregions: [eu]\n")
    result = runner.invoke(app, ["validate", str(fleet)])
    assert result.exit_code == 0, result.output
    # `nodes` and `idle_duration` are acted on (docs/backends.md); a cloud's `regions` is not.
    assert result.stderr.splitlines() == [f"{fleet}: warning: Ferry does not act on yet: regions"]
    assert "cloud" in result.stdout


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        ("", None),
        ("auth: true\n", None),
        ("https: true\n", None),  # the URL's scheme on the proxy's domain (docs/services.md#https)
        ("gateway: gw\nrate_limits: [{rps: 1}]\n", "gateway"),
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


def test_the_api_refuses_before_touching_the_store(tmp_path: Path) -> None:
    # No client and no store: the refusal must come before either is used.
    api = FerryAPI(cast(Any, None), cast(Any, None))
    configuration = parse_configuration({"type": "task", "commands": ["  "]})
    with pytest.raises(ConfigurationError) as caught:
        asyncio.run(api.submit(cast(Any, configuration), repo_dir=tmp_path, run_name="bad"))
    assert str(caught.value) == f"run bad: {NOTHING_TO_RUN}"
