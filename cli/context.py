"""What every run command starts from: settings, the store, the embedded stack, the API, a run by name."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from core.settings import DEFAULT_PROJECT, Settings

if TYPE_CHECKING:
    from cli.api import FerryAPI
    from core.temporal_connection import TemporalConnection
    from store import RunRecord, Store


@dataclass
class Context:
    settings: Settings
    project: str
    _stack: Future[str] | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls) -> Context:
        return cls(Settings.from_env(), os.environ.get("FERRY_PROJECT") or DEFAULT_PROJECT)

    @property
    def embedded(self) -> bool:
        """Whether runs go to the embedded stack (no FERRY_TEMPORAL_ADDRESS or TEMPORAL_ADDRESS)."""
        return self.settings.temporal_address is None

    def connection(self) -> TemporalConnection:
        """How to reach Temporal, TLS and API key included (the embedded stack started first if that is
        what is used); ConnectionSettingsError for settings that cannot work (docs/deployment.md)."""
        return self.settings.temporal_connection(self.ensure_stack())

    def store(self) -> Store:
        from store import open_store

        self._private_database()
        return open_store(self.settings.database_url)

    def _private_database(self) -> None:
        """The SQLite store created 0600 (in FERRY_HOME created 0700) before SQLite creates it with the
        umask's mode: it holds every run's env. SQLite gives its -wal and -shm the database's mode."""
        from sqlalchemy.engine import make_url

        from embedded.processes import PRIVATE_FILE, private_dir

        url = make_url(self.settings.database_url)
        database = url.database
        if url.get_backend_name() != "sqlite" or not database or database.startswith("file:"):
            return
        if database == ":memory:":
            return
        path = Path(database)
        if path.parent == self.settings.home:
            private_dir(path.parent)
        with contextlib.suppress(FileExistsError, FileNotFoundError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))

    def ensure_stack(self) -> str:
        """The Temporal address; the embedded stack is started first if that is what is used."""
        if self._stack is not None:
            return self._stack.result()
        from embedded.stack import ensure_stack

        return ensure_stack(self.settings)

    def prepare_stack(self) -> None:
        """Start ensuring the stack in a thread, while the command imports what it needs (the Temporal SDK
        takes a while); `ensure_stack` and `api` then wait for it."""
        if self._stack is None and self.embedded:
            import threading

            from embedded.stack import ensure_stack

            future: Future[str] = Future()

            def run() -> None:
                try:
                    future.set_result(ensure_stack(self.settings))
                except BaseException as err:  # handed to whoever waits for the stack
                    future.set_exception(err)

            threading.Thread(target=run, name="ferry-stack", daemon=True).start()
            self._stack = future

    async def api(self) -> FerryAPI:
        """The API on a connected client (the embedded stack started if needed)."""
        self.prepare_stack()
        from cli.api import FerryAPI
        from cli.errors import UnreachableServer, connect_problem
        from worker.temporal import connect_to

        connection, store = await asyncio.gather(
            asyncio.to_thread(self.connection), asyncio.to_thread(self.store)
        )
        try:
            client = await connect_to(connection)
        except RuntimeError as err:
            problem = str(err)
        else:
            from cli.user_keys import public_key_line

            keys = [await asyncio.to_thread(public_key_line, self.settings.home)]
            return FerryAPI(client, store, project=self.project, authorized_keys=keys)
        raise UnreachableServer(connect_problem(connection.address, problem))

    def find_run(self, store: Store, name: str) -> RunRecord:
        """The latest run of this name in the project (or the run with this id); RunNotFound if none."""
        from cli.errors import RunNotFound

        record = store.find_run(self.project, name)
        if record is None:
            by_id = store.get_run(name)
            if by_id is not None and by_id.project == self.project:
                record = by_id
        if record is None:
            raise RunNotFound(f"no run named {name!r} in project {self.project!r} (see ferry ps -a)")
        return record


def confirm(question: str, *, yes: bool) -> bool:
    """Ask on the terminal (`-y` answers yes); with no terminal to ask on, a clear error."""
    if yes:
        return True
    from cli.errors import USAGE_EXIT, CommandError

    if not sys.stdin.isatty():
        raise CommandError(
            "no terminal to ask for confirmation on: pass -y to go ahead without asking", USAGE_EXIT
        )
    import typer

    return typer.confirm(question, default=False, err=True)
