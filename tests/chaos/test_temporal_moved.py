"""The Temporal dev server SIGKILLed and its port taken before the next command: the command starts it on
another port, and the worker, the proxy and Ferry's API, which knew it by its old address, start again
with the new one (embedded/stack.py, docs/chaos.md#temporal-on-another-port). Without that, the worker
would poll whatever listens at the old address, for ever, and no run would start. And a port taken between
its choice and the dev server's bind (two stacks started at once): the dev server counts as up only on its
own listener."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from embedded.processes import listens_on
from embedded.stack import Stack, StackError
from tests.chaos.stream import LIMIT, stack_process, until
from tests.e2e.conftest import Ferry, ferry_env, stack_of, task


def bound(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def test_a_temporal_started_again_on_another_port_gets_a_worker_and_proxy_that_follow(tmp_path: Path) -> None:
    home, configs = tmp_path / "home", tmp_path / "configs"
    home.mkdir()
    configs.mkdir()
    with stack_of(Ferry(home, ferry_env(home))) as ferry:
        before = ferry("apply", "-y", "-f", task(configs, "before", "echo before"), timeout=LIMIT)
        assert (before.returncode, before.stdout) == (0, "before\n"), before.stderr
        status = json.loads(ferry("server", "status", "--json").stdout)
        old = {p["name"]: p for p in status["processes"]}
        os.kill(old["temporal"]["pid"], signal.SIGKILL)
        until("the dev server to die", lambda: not stack_process(home, "temporal").alive)
        with socket.socket() as squatter:  # its port taken meanwhile
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            port = int(old["temporal"]["address"].rsplit(":", 1)[1])
            # The dead server's side of the worker's connections holds the port until the worker lets go.
            until("the killed server's port to be free", lambda: bound(squatter, port))
            squatter.listen()
            after = ferry("apply", "-y", "-f", task(configs, "after", "echo after"), timeout=LIMIT)
            assert (after.returncode, after.stdout) == (0, "after\n"), after.stderr
            now = {p["name"]: p for p in json.loads(ferry("server", "status", "--json").stdout)["processes"]}
    assert now["temporal"]["address"] != old["temporal"]["address"]
    assert now["worker"]["pid"] != old["worker"]["pid"] and now["proxy"]["pid"] != old["proxy"]["pid"]
    assert now["api"]["pid"] != old["api"]["pid"]  # Ferry's API is a Temporal client too
    assert now["agent"]["pid"] == old["agent"]["pid"]  # the agent knows no Temporal: it stays


def test_a_port_another_takes_between_choice_and_bind_is_not_mistaken_for_the_dev_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stacks started at the same moment can choose the same free port: the one whose dev server
    cannot bind it must not take the other's open port for its own (its worker would poll the other's
    Temporal). Here the race is made certain: the first choice is a port a squatter listens on."""
    home = tmp_path / "home"
    home.mkdir()
    stack = Stack(home, ferry_env(home))
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        choose = Stack._choose_port
        chosen: list[int] = []

        def first_the_taken_port(self: Stack, recorded: int | None, default: int) -> int:
            port = taken if not chosen else choose(self, recorded, default)
            chosen.append(port)
            return port

        monkeypatch.setattr(Stack, "_choose_port", first_the_taken_port)
        try:
            status = stack.start(timeout=LIMIT)
            assert status.running
            assert status.address is not None and status.address != f"127.0.0.1:{taken}"
            port = int(status.address.rsplit(":", 1)[1])
            temporal = stack_process(home, "temporal").pid
            assert temporal is not None and listens_on(temporal, port)
            assert chosen[0] == taken
        finally:
            stack.stop()


def test_a_dev_server_whose_own_internal_port_was_taken_is_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dev server chooses its internal services' ports itself, and panics when another process binds
    one first (`Failed to start gRPC listener ... bind: address already in use`, seen once in CI): the
    stack starts it again rather than failing the command. Here the first start is made to fail so."""
    home = tmp_path / "home"
    home.mkdir()
    stack = Stack(home, ferry_env(home))
    command = Stack._temporal_command
    starts: list[list[str]] = []

    def failing_first(self: Stack, state: Any) -> list[str]:
        real = command(self, state)
        starts.append(real)
        if len(starts) > 1:
            return real
        words = "Failed to start gRPC listener: listen tcp 127.0.0.1:1: bind: address already in use"
        return ["sh", "-c", f'echo "{words}"; echo "panic: runtime error"; exit 2']

    monkeypatch.setattr(Stack, "_temporal_command", failing_first)
    try:
        status = stack.start(timeout=LIMIT)
        assert status.running and len(starts) == 2
        assert "address already in use" in (home / "stack" / "temporal.log").read_text()
    finally:
        stack.stop()


def test_a_dev_server_that_fails_otherwise_fails_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any other early exit is not retried: the command says why, with the log's last line."""
    home = tmp_path / "home"
    home.mkdir()
    stack = Stack(home, ferry_env(home))
    monkeypatch.setattr(Stack, "_temporal_command", lambda self, state: ["sh", "-c", "echo broken; exit 3"])
    try:
        with pytest.raises(StackError, match="the temporal exited with status 3: broken"):
            stack.start(timeout=LIMIT)
    finally:
        stack.stop()
