"""Every error a user can cause is one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Ferry, ferry_env, last_line


@pytest.fixture(scope="module")
def ferry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ferry]:
    """A FERRY_HOME of its own: none of these commands may start the embedded stack in it."""
    home = tmp_path_factory.mktemp("no-stack-home")
    yield Ferry(home, ferry_env(home))
    assert not (home / "stack").exists()


@pytest.fixture
def bad_file(tmp_path: Path) -> str:
    path = tmp_path / "bad.yml"
    path.write_text("type: task\ncomands:\n  - echo hi\n")
    return str(path)


def check_one_line(result: object, code: int, *, expected: str) -> None:
    assert getattr(result, "returncode") == code  # noqa: B009
    stderr: str = getattr(result, "stderr")  # noqa: B009
    assert "Traceback" not in stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("ferry") and expected in stderr, stderr


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (["apply", "-y", "-f", "missing.yml"], 2, "ferry apply: missing.yml: no such file"),
        (["apply", "-y", "-f", "examples/hello.yml", "--bogus"], 2, "ferry apply: no such option: --bogus"),
        (["ps", "--watch=maybe"], 2, "ferry ps:"),
        (["logs"], 2, "ferry logs: missing argument 'RUN'"),
        (["wait", "x", "--status", "sleeping"], 2, "ferry wait: invalid value for '--status'"),
        (["wait", "x", "--timeout", "soon"], 2, "ferry wait: --timeout: expected a duration"),
        (["logs", "x", "--since", "yesterday"], 2, "ferry logs: --since: expected a duration"),
        (["apply", "-y", "-f", "examples/hello.yml", "-n", "Bad_Name"], 2, "ferry apply: -n: invalid name"),
        (["apply", "-y", "-f", "examples/hello.yml", "-e", "1X=2"], 2, "ferry apply: -e '1X=2'"),
        (["no-such-command"], 2, "ferry: no such command 'no-such-command'"),
        (["server", "restart"], 2, "ferry server: no such command 'restart'"),
    ],
)
def test_bad_input_is_one_line(ferry: Ferry, args: list[str], code: int, expected: str) -> None:
    check_one_line(ferry(*args), code, expected=expected)


def test_invalid_file_names_the_field_and_submits_nothing(ferry: Ferry, bad_file: str) -> None:
    result = ferry("apply", "-y", "-f", bad_file)
    check_one_line(
        result, 2, expected=f"ferry apply: {bad_file}:2: comands: unknown field (did you mean 'commands'?)"
    )


def test_without_a_terminal_apply_needs_y(ferry: Ferry) -> None:
    result = ferry("apply", "-f", "examples/hello.yml")
    assert result.returncode == 2
    assert (
        last_line(result.stderr)
        == "ferry apply: no terminal to ask for confirmation on: pass -y to go ahead without asking"
    )
    assert "Traceback" not in result.stderr


def test_unreachable_server(tmp_path: Path) -> None:
    ferry = Ferry(tmp_path, {**ferry_env(tmp_path), "FERRY_TEMPORAL_ADDRESS": "127.0.0.1:1"})
    result = ferry("apply", "-y", "-f", "examples/hello.yml")
    assert result.returncode == 4
    assert "Traceback" not in result.stderr
    assert (
        last_line(result.stderr)
        == "ferry apply: cannot reach the Temporal server at 127.0.0.1:1: Connection refused"
    )
    # With an address configured, no embedded stack is started.
    assert not (tmp_path / "stack").exists()
