"""More workers beside the embedded stack's one, on its Temporal server, its store and its local agent, as a
deployment runs several (docker-compose.yml; docs/scaling.md#several-workers). For the benchmark's
`--workers N` and the tests that kill one of several workers.

They are not the stack's: `ferry server stop` and the next `ferry` command neither stop nor restart them;
whoever started them stops them (`stop`). Each has its own ready file and log in the stack's directory,
`worker-<n>.ready` and `worker-<n>.log` (n from 2: the stack's own worker is the first).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from embedded.processes import private_opener, terminate
from embedded.stack import Stack, worker_command

START_TIMEOUT = 60.0


class ExtraWorkers:
    def __init__(self, stack: Stack) -> None:
        self._stack = stack
        self._processes: dict[int, subprocess.Popen[bytes]] = {}  # by number, from 2

    def ready_file(self, number: int) -> Path:
        return self._stack.dir / f"worker-{number}.ready"

    def start(self, count: int, timeout: float = START_TIMEOUT) -> list[int]:
        """`count` more workers, once each polls; their pids."""
        env = self._stack.worker_env()
        started = []
        for number in range(len(self._processes) + 2, len(self._processes) + 2 + count):
            ready = self.ready_file(number)
            ready.unlink(missing_ok=True)
            with open(self._stack.dir / f"worker-{number}.log", "ab", opener=private_opener) as log:
                process = subprocess.Popen(
                    worker_command(ready),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    env=env,
                    cwd=self._stack.dir,
                )
            self._processes[number] = process
            started.append((number, process))
        deadline = time.monotonic() + timeout
        for number, process in started:
            while not self._ready(number, process):
                if process.poll() is not None:
                    raise RuntimeError(f"worker {number} exited ({process.returncode}): see its log")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"worker {number} did not poll within {timeout:.0f}s")
                time.sleep(0.05)
        return [process.pid for _, process in started]

    def _ready(self, number: int, process: subprocess.Popen[bytes]) -> bool:
        try:
            return int(self.ready_file(number).read_text()) == process.pid
        except (OSError, ValueError):
            return False

    @property
    def pids(self) -> list[int]:
        """The pids of those still running."""
        return [p.pid for p in self._processes.values() if p.poll() is None]

    def stop(self) -> None:
        for number, process in self._processes.items():
            terminate(process.pid, str(self.ready_file(number)))
            process.wait()
        self._processes = {}
