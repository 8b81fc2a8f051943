"""A container job's output, copied from the engine into the task's log, and its exit, in a thread of its own.

The engine keeps the container's output; a thread per running container follows it and appends it to the
same log file the process executor writes, so every reader of a job's log is the same. The log is written
unbuffered, so its size is always what was copied. An agent that restarts while the container runs (or
loses the engine for a while) asks the engine for the output from the start again and drops as many bytes
as the log already has: every byte is copied once. (The engines' log timestamps cannot mark a place: Podman
gives whole seconds.) The thread ends with the container's exit status, or finding it gone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

import docker
from docker.errors import APIError, NotFound
from requests.exceptions import RequestException

from agent.records import TaskPaths

logger = logging.getLogger(__name__)

_ENGINE_RETRY = 1.0


class ContainerOutput(threading.Thread):
    """Follows one container: its output into the log, then its exit status (`exit_status`, `gone`)."""

    def __init__(
        self, api: docker.APIClient, container_id: str, paths: TaskPaths, ended: Callable[[], None]
    ) -> None:
        super().__init__(name=f"output-{paths.root.name}", daemon=True)
        self._api = api
        self.container_id = container_id
        self._paths = paths
        self._ended = ended  # wakes the agent's watcher (thread-safe)
        self.exit_status: int | None = None
        self.gone = False
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self._follow()
        except Exception:
            logger.exception("following container %s failed", self.container_id)
            self.gone = self.exit_status is None
        finally:
            self._api.close()
            self.done.set()
            self._ended()

    def _follow(self) -> None:
        with open(self._paths.log, "ab", buffering=0) as log:
            while True:
                try:
                    self._copy(log)
                    state = self._api.inspect_container(self.container_id)["State"]
                except NotFound:
                    self.gone = True
                    return
                except (APIError, RequestException, OSError) as exc:
                    # The engine restarting (its service replaced): the container goes on without it.
                    logger.warning("container %s: engine unavailable, retrying: %s", self.container_id, exc)
                    time.sleep(_ENGINE_RETRY)
                    continue
                if not state.get("Running"):
                    self.exit_status = int(state.get("ExitCode", -1))
                    return

    def _copy(self, log: BinaryIO) -> None:
        """Copy the output the log lacks until the stream ends (the container stopped)."""
        skip = log.seek(0, 2)
        for chunk in self._api.logs(self.container_id, stream=True, follow=True):
            if skip >= len(chunk):
                skip -= len(chunk)
                continue
            log.write(chunk[skip:])
            skip = 0
