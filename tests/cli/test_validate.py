"""`ferry validate`: summaries for valid files, one line per issue for the others, and the exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cli.validate
from cli.main import app

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "examples").glob("*.yml"))

runner = CliRunner()


@pytest.fixture(autouse=True)
def _in_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_every_example_is_valid() -> None:
    result = runner.invoke(app, ["validate", *EXAMPLES])
    assert result.exit_code == 0, result.output
    # Some examples ask for what Ferry does not do yet: warnings only (tests/core/test_config.py says which).
    assert all(": warning: Ferry does not act on yet: " in line for line in result.stderr.splitlines())
    for file in EXAMPLES:
        assert file in result.stdout
    for word in ("FILE", "TYPE", "NAME", "RESOURCES", "SCALE", "RETRY", "SCHEDULE"):
        assert word in result.stdout
    assert "replicas 1..3" in result.stdout
    assert "hosts 3" in result.stdout
    assert "0 2 * * *" in result.stdout
    assert "no-capacity, interruption, error for 1h" in result.stdout


def test_summary_row_of_one_file() -> None:
    result = runner.invoke(app, ["validate", "-f", "examples/two-node.yml"])
    assert result.exit_code == 0
    row = next(line for line in result.stdout.splitlines() if line.startswith("examples/two-node.yml"))
    assert row.split() == [
        "examples/two-node.yml", "task", "two-node", "cpu=1..", "mem=1GB..", "disk=1GB..",
        "nodes", "2", "off", "-",
    ]  # fmt: skip


def test_file_option_is_repeatable_and_mixes_with_arguments() -> None:
    result = runner.invoke(
        app,
        ["validate", "-f", "examples/hello.yml", "--file", "examples/service.yml", "examples/scheduled.yml"],
    )
    assert result.exit_code == 0
    for file in ("examples/hello.yml", "examples/service.yml", "examples/scheduled.yml"):
        assert file in result.stdout


def test_bad_file_prints_one_line_per_issue_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("type: task\ncomands: [x]\nnodes: 0\npriority: 101\n")
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    # Field errors come first: cross-field checks (such as the missing `commands`) need valid fields.
    assert result.stderr.splitlines() == [
        f"{bad}:2: comands: unknown field (did you mean 'commands'?)",
        f"{bad}:3: nodes: should be greater than or equal to 1, got 0",
        f"{bad}:4: priority: should be less than or equal to 100, got 101",
    ]
    assert result.stdout == ""
    assert "Traceback" not in result.output


def test_one_bad_file_among_good_ones(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("type: service\ncommands: [serve]\n")
    result = runner.invoke(app, ["validate", "examples/hello.yml", str(bad), "missing.yml", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{bad}:1: port: required field is missing",
        "missing.yml: no such file",
        f"{tmp_path}: is a directory, not a configuration file",
    ]
    assert "examples/hello.yml" in result.stdout


def test_warning_line_for_fields_not_acted_on(tmp_path: Path) -> None:
    config = tmp_path / "x.yml"
    config.write_text("type: task\ncommands: [x]\nnvcc: true\nspot_policy: auto\n")
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [f"{config}: warning: Ferry does not act on yet: nvcc, spot_policy"]
    assert str(config) in result.stdout


def test_no_files_is_a_usage_error() -> None:
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 2
    assert "name at least one file" in result.stderr


def test_unexpected_error_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(path: str) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(cli.validate, "load_run_file", explode)
    result = runner.invoke(app, ["validate", "examples/hello.yml"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "examples/hello.yml: internal error while validating: RuntimeError: boom"
    ]


def test_command_line_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yml"
    bad.write_text("type: task\ncommands: [echo\n")
    result = subprocess.run(
        [sys.executable, "-c", "from cli.main import app; app()", "validate", *EXAMPLES, str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if ": warning: " not in line]
    assert len(errors) == 1
    assert errors[0].startswith(f"{bad}:3:")
    assert "examples/hello.yml" in result.stdout
