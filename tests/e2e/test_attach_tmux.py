"""`ferry attach` in a real terminal (tmux, docs/attach.md): it offers once to include Ferry's SSH config,
shows the forwards and the IDE link, a forwarded port answers, and Ctrl-C releases the forward and ends the
command; `ferry ps` shows the link and whether someone is attached or when inactivity stops the dev
environment. `ferry stop` ends an interactive SSH session into the job cleanly: the client is told why and
exits, and the session's shell is gone."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.ssh_hosts import CONFIG_FILE, include_line
from embedded.processes import free_port
from tests.e2e.conftest import FERRY, ROOT, SMALL, Ferry

WAIT = 60.0  # seconds any one thing may take: a generous bound, not a timing assertion
INACTIVITY = 3600  # the dev environment's inactivity_duration: long enough never to stop it here


# The command runs under a shell that waits for it and says how it ended: tmux's own record of a pane's exit
# status is not to be relied on (its server was seen to leave the exited command unreaped now and then).
# The shell's no-op trap lets Ctrl-C reach the command alone (a trapped signal is the default again in it).
_SAYS_HOW_IT_ENDED = 'trap : INT; "$@"; echo "[exited $?]"'
_ENDED = re.compile(r"^\[exited (\d+)\]$", re.MULTILINE)


class Terminal:
    """A tmux server of its own (its own socket and no user config), each command in a window of its own;
    a window stays once its command has exited, so its screen can be read."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        tmux = shutil.which("tmux")
        assert tmux is not None, "tmux is not installed (scripts/test.sh installs it)"
        conf = directory / "tmux.conf"
        conf.write_text("set-option -g remain-on-exit on\nset-option -g history-limit 10000\n")
        self._base = [tmux, "-S", str(directory / "tmux.sock"), "-f", str(conf)]
        self.env = env
        self._windows = 0
        self._target = ""

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            [*self._base, *args], env=self.env, capture_output=True, text=True, timeout=30, check=True
        )
        return done.stdout

    def start(self, *command: str) -> None:
        """The command in a window of its own, which the other methods then mean; wide enough that no line
        of `ferry attach` (the IDE link) is wrapped."""
        self._windows += 1
        self._target = f"t{self._windows}"
        shell = shlex.join(["sh", "-c", _SAYS_HOW_IT_ENDED, "sh", *command])
        self.tmux("new-session", "-d", "-s", self._target, "-x", "500", "-y", "50", "-c", str(ROOT), shell)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", self._target, "-S", "-")

    def wait_for(self, text: str) -> str:
        deadline = time.monotonic() + WAIT
        while text not in (screen := self.screen()):
            assert time.monotonic() < deadline, f"no {text!r} on the screen:\n{screen}"
            time.sleep(0.1)
        return screen

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self._target, *keys)

    def exit_status(self) -> int:
        """The command's exit status, once it has exited."""
        deadline = time.monotonic() + WAIT
        while not (ended := _ENDED.findall(self.screen())):
            assert time.monotonic() < deadline, f"the command did not exit:\n{self.screen()}"
            time.sleep(0.1)
        return int(ended[-1])

    def close(self) -> None:
        subprocess.run([*self._base, "kill-server"], env=self.env, capture_output=True, timeout=30)


@pytest.fixture
def terminal(ferry: Ferry, tmp_path: Path) -> Iterator[Terminal]:
    """A terminal whose HOME is the test's own: `~/.ssh/config` there is what attach offers to change."""
    home = tmp_path / "home"
    home.mkdir()
    opened = Terminal(tmp_path, {**ferry.env, "HOME": str(home)})
    try:
        yield opened
    finally:
        opened.close()


def dev_environment(ferry: Ferry, directory: Path, name: str, extra: str = "") -> None:
    config = directory / f"{name}.yml"
    config.write_text(f"type: dev-environment\nname: {name}\nenv: [GREETING=hello]\n{extra}{SMALL}")
    applied = ferry("apply", "-y", "-d", "-f", str(config))
    assert applied.returncode == 0, applied.stderr


def ps_run(ferry: Ferry, name: str) -> dict[str, Any]:
    listed = ferry("ps", "--json")
    assert listed.returncode == 0, listed.stderr
    [run] = [run for run in json.loads(listed.stdout) if run["name"] == name]
    return run


def inactivity(ferry: Ferry, name: str) -> dict[str, Any]:
    [job] = ps_run(ferry, name)["jobs"]
    assert job["status"] == "running"
    return job["inactivity"]


def until_inactivity(ferry: Ferry, name: str, attached: bool) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while (found := inactivity(ferry, name))["attached"] != attached:
        assert time.monotonic() < deadline, f"ferry ps says {found}"
        time.sleep(0.2)
    return found


def test_attach_in_a_terminal_shows_forwards_and_link_and_ctrl_c_releases_them(
    ferry: Ferry, terminal: Terminal, tmp_path: Path
) -> None:
    port = free_port()
    init = f"python3 -m http.server {port} --bind 127.0.0.1 > /dev/null 2>&1 &"
    extra = f"ide: cursor\nports: [{port}]\ninactivity_duration: {INACTIVITY}\ninit: [{json.dumps(init)}]\n"
    dev_environment(ferry, tmp_path, "dev-tmux", extra)
    try:
        # Nobody attached yet: `ferry ps` counts down from the job's start, and has no link to show.
        before = inactivity(ferry, "dev-tmux")
        assert before["attached"] is False and before["stops_at"] > time.time()
        assert "ide_link" not in ps_run(ferry, "dev-tmux")
        assert "idle: stops in " in ferry("ps").stdout

        terminal.start(*FERRY, "attach", "dev-tmux", "--no-logs")
        user_config = Path(terminal.env["HOME"]) / ".ssh" / "config"
        terminal.wait_for(f"Add `{include_line(ferry.home)}` to {user_config}?")
        terminal.keys("y", "Enter")
        screen = terminal.wait_for("attached to run dev-tmux")
        assert user_config.read_text().splitlines()[0] == include_line(ferry.home)

        [forward] = re.findall(rf"^port {port} of the job: http://localhost:(\d+).*$", screen, re.MULTILINE)
        [link] = re.findall(r"^open in your IDE: (\S+)$", screen, re.MULTILINE)
        assert link.startswith("cursor://vscode-remote/ssh-remote+dev-tmux/")
        with httpx.Client(trust_env=False, timeout=10) as client:
            assert client.get(f"http://localhost:{forward}/").status_code == 200  # the job's own server

        # The forward is an SSH connection into the job: attached; the link is the one attach printed.
        assert until_inactivity(ferry, "dev-tmux", attached=True)["stops_at"] is None
        assert ps_run(ferry, "dev-tmux")["ide_link"] == link
        assert "attached" in ferry("ps").stdout

        # The user's own ssh, through the Include attach added: the link's working directory.
        ran = subprocess.run(
            ["ssh", "-F", str(user_config), "-o", "BatchMode=yes", "dev-tmux", "pwd"],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert link == f"cursor://vscode-remote/ssh-remote+dev-tmux{ran.stdout.strip()}"

        detached_at = time.time()
        terminal.keys("C-c")
        assert terminal.exit_status() == 0
        assert "detached: run dev-tmux goes on" in terminal.screen()
        with pytest.raises(httpx.ConnectError), httpx.Client(trust_env=False, timeout=5) as client:
            client.get(f"http://localhost:{forward}/")  # the forward is released

        # Nobody attached now: the countdown starts again from the forward's close.
        after = until_inactivity(ferry, "dev-tmux", attached=False)
        assert after["stops_at"] >= detached_at + INACTIVITY
        assert ps_run(ferry, "dev-tmux")["status"] == "running"  # the run goes on
    finally:
        ferry("stop", "-y", "-x", "dev-tmux")


def test_stop_ends_an_open_ssh_session_cleanly(ferry: Ferry, terminal: Terminal, tmp_path: Path) -> None:
    dev_environment(ferry, tmp_path, "dev-stop")
    try:
        # Attached once (with the Include already there: nothing to ask), so that `ssh dev-stop` works.
        user_config = Path(terminal.env["HOME"]) / ".ssh" / "config"
        user_config.parent.mkdir(mode=0o700)
        user_config.write_text(include_line(ferry.home) + "\n")
        terminal.start(*FERRY, "attach", "dev-stop", "--no-logs")
        terminal.wait_for("attached to run dev-stop")
        terminal.keys("C-c")
        assert terminal.exit_status() == 0

        # An interactive shell in the job, on a terminal, as a user's own `ssh dev-stop` opens it.
        terminal.start("ssh", "-F", str(ferry.home / CONFIG_FILE), "dev-stop")
        terminal.keys("echo shell=$$ says $GREETING", "Enter")
        [shell] = re.findall(r"^shell=(\d+) says hello", terminal.wait_for("says hello"), re.MULTILINE)

        stopped = ferry("stop", "-y", "dev-stop")
        assert stopped.returncode == 0, stopped.stderr
        assert "run dev-stop: terminated" in stopped.stderr
        status = terminal.exit_status()  # the client was not left hanging
        screen = terminal.screen()
        # Told why: by the session's own message, or, when the disconnect overtakes it on a busy machine,
        # by the connection's (OpenSSH prints "Received disconnect from ...: task '...' has ended").
        assert re.search(r"(ferry-agent|Received disconnect from .*): task '[^']+' has ended", screen), screen
        assert status == 255  # OpenSSH's status for a connection closed by the other side
        deadline = time.monotonic() + WAIT
        while _alive(int(shell)):  # what the session ran is gone with it
            assert time.monotonic() < deadline, f"the session's shell {shell} outlived the stop"
            time.sleep(0.1)
    finally:
        ferry("stop", "-y", "-x", "dev-stop")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
