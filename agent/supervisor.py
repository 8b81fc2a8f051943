"""Keeps an SSH host's agent running: starts it, and starts it again whenever it dies.

An SSH host's deployment (activities/ssh_host.py) starts this, not the agent, detached: `ferry_supervisor.py
--port P --state-file F -- <the agent's command>` from the agent bundle's root, on the host's own Python
(stdlib only, nothing newer than 3.10; docs/fleets.md#ssh-fleets). The restarted agent has the same
port, token and data directory, so the worker's tunnel and client reach it again and it takes its tasks
back (agent/tasks.py recovers them from their records).

- The state file says which agent runs (`pid`), whether it listens yet (`ready`) and how many times it
  was started (`starts`): the worker waits for an agent being started again rather than losing the host.
- An agent that never listened on its port at the first start is not started again: the supervisor exits
  with its status, and the deployment reports the log (an interpreter that cannot load the agent, say).
- Later deaths are followed by a new start at once; an agent that dies again before it listens waits
  1, 2, 4 ... up to MAX_DELAY seconds before the next.
- SIGTERM (the deployment stopping or replacing the agent) is passed to the agent; once it has exited,
  so does the supervisor.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from types import FrameType

MAX_DELAY = 30.0
_POLL = 0.05


class Supervisor:
    def __init__(self, command: list[str], port: int, state_file: str) -> None:
        self.command = command
        self.port = port
        self.state_file = state_file
        self.starts = 0
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True
        self._stop_child()

    def _stop_child(self) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def run(self) -> int:
        ever_ready, failures = False, 0
        while True:
            self.child = subprocess.Popen(self.command, stdin=subprocess.DEVNULL)
            self.starts += 1
            if self.stopping:  # the signal came as it started
                self._stop_child()
            self._write_state(self.child.pid, ready=False)
            ready = self._wait_listening(self.child)
            if ready:
                self._write_state(self.child.pid, ready=True)
            status = self.child.wait()
            if self.stopping:
                return 0
            if not ever_ready and not ready:
                _say(f"the agent exited ({_describe(status)}) before it listened on port {self.port}")
                return status if status > 0 else 1
            ever_ready = ever_ready or ready
            failures = 0 if ready else failures + 1
            delay = min(MAX_DELAY, 2.0 ** (failures - 1)) if failures else 0.0
            _say(f"the agent exited ({_describe(status)}); starting it again in {delay:g}s")
            self._write_state(0, ready=False)
            if not self._sleep(delay):
                return 0

    def _wait_listening(self, child: subprocess.Popen[bytes]) -> bool:
        while child.poll() is None and not self.stopping:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                time.sleep(_POLL)
        return False

    def _sleep(self, seconds: float) -> bool:
        """False when asked to stop meanwhile."""
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(min(_POLL * 4, max(0.0, deadline - time.monotonic())))
        return not self.stopping

    def _write_state(self, pid: int, ready: bool) -> None:
        tmp = f"{self.state_file}.new"
        with open(tmp, "w") as out:
            json.dump({"pid": pid, "ready": ready, "starts": self.starts}, out)
        os.replace(tmp, self.state_file)


def _describe(status: int) -> str:
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


def _say(line: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(f"{stamp} ferry-supervisor[{os.getpid()}]: {line}\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ferry-supervisor")
    parser.add_argument("--port", type=int, required=True, help="the agent's port: listening is ready")
    parser.add_argument("--state-file", required=True, help="the running agent's pid, whether it is ready")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the agent's command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("the agent's command is missing (after --)")
    supervisor = Supervisor(command, args.port, args.state_file)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, supervisor.on_signal)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
