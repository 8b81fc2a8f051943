"""The real `ferry` command, in a fresh FERRY_HOME with no FERRY_TEMPORAL_ADDRESS: the embedded stack."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.containers import PodmanService, podman_service

ROOT = Path(__file__).parents[2]
_SCRIPT = Path(sys.executable).parent / "ferry"
FERRY = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "cli"]
# Small enough for any machine, so that runs never wait for each other's capacity.
SMALL = "resources: {cpu: 0.., memory: 0GB.., disk: 0GB..}\n"


@dataclass
class Ferry:
    """Runs `ferry ARGS...` in its FERRY_HOME, without a terminal, and returns what it did."""

    home: Path
    env: dict[str, str] = field(default_factory=dict)
    command: list[str] = field(default_factory=lambda: list(FERRY))
    cwd: Path = ROOT  # another release's code runs from its own directory (tests/upgrade)

    def __call__(
        self, *args: str, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command, *args],
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.command, *args],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def ferry_env(home: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("FERRY_", "DSTACK_", "TEMPORAL_"))  # TEMPORAL_ADDRESS would mean no stack
    }
    env["FERRY_HOME"] = str(home)
    env["FERRY_USER"] = "tester"
    return env


@pytest.fixture(scope="module")
def ferry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ferry]:
    """One FERRY_HOME (and so one embedded stack) per module; the stack is stopped at the end."""
    home = tmp_path_factory.mktemp("ferry-home")
    with stack_of(Ferry(home, ferry_env(home))) as runner:
        yield runner


@contextlib.contextmanager
def stack_of(runner: Ferry) -> Iterator[Ferry]:
    """`runner`, and at the end its runs aborted and its embedded stack stopped."""
    try:
        yield runner
    finally:
        # Runs a failed test left active are aborted first: their processes outlive the agent by design.
        listed = runner("ps", "--json")
        for run in json.loads(listed.stdout) if listed.returncode == 0 else []:
            runner("stop", "-y", "-x", run["name"])
        runner("server", "stop")


def task(directory: Path, name: str, *commands: str, extra: str = "") -> str:
    """Writes a small task configuration; returns its path."""
    path = directory / f"{name}.yml"
    lines = [
        f"type: task\nname: {name}\ncommands:\n",
        *(f"  - {json.dumps(c)}\n" for c in commands),
        SMALL,
        extra,
    ]
    path.write_text("".join(lines))
    return str(path)


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanService]:
    """`podman system service` with the test images, for a module's container jobs (testbed/containers.py)."""
    with podman_service(tmp_path_factory.mktemp("podman")) as service:
        yield service


@contextlib.contextmanager
def podman_stack(
    tmp_path_factory: pytest.TempPathFactory, podman: PodmanService, **env: str
) -> Iterator[Ferry]:
    """A module's embedded stack whose agent runs containers on `podman` (DOCKER_HOST), with `env` added."""
    home = tmp_path_factory.mktemp("ferry-home")
    with stack_of(Ferry(home, {**ferry_env(home), **podman.env, "DOCKER_HOST": podman.url, **env})) as runner:
        yield runner
