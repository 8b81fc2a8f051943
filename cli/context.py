"""What every run command starts from: settings, the store, the embedded stack, the API, a run by name."""

from __future__ import annotations

import asyncio
import os
import sys
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.settings import DEFAULT_PROJECT, Settings

if TYPE_CHECKING:
    from cli.api import FerryAPI
    from cli.backend_clients import ProjectBackends
    from cli.fleet_api import FleetAPI
    from cli.fleet_clients import ProjectFleets
    from cli.remote_runs import RunsClient
    from cli.secret_clients import ProjectSecrets
    from cli.volume_clients import ProjectVolumes
    from core.temporal_connection import TemporalConnection
    from store import RunRecord, Store
    from store.run_reads import RunReads


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

    def starts_stack(self) -> bool:
        """Whether reaching Ferry's API starts the embedded stack: no login, no Temporal address."""
        from cli.login_file import kept_login

        return self.embedded and kept_login() is None

    def through_api(self) -> bool:
        """Whether the project's things are reached through Ferry's API (docs/teams.md#one-way-in): on the
        embedded stack, or logged in; not by an operator's CLI with Temporal's address and no login."""
        from cli.login_file import kept_login

        return self.embedded or kept_login() is not None

    def connection(self) -> TemporalConnection:
        """How to reach Temporal, TLS and API key included (the embedded stack started first if that is
        what is used); ConnectionSettingsError for settings that cannot work (docs/deployment.md)."""
        return self.settings.temporal_connection(self.ensure_stack())

    def store(self) -> Store:
        from cli.home_store import open_home_store

        return open_home_store(self.settings)

    def ensure_stack(self) -> str:
        """The Temporal address; the embedded stack is started first if that is what is used."""
        if self._stack is not None:
            return self._stack.result()
        from embedded.stack import ensure_stack

        return ensure_stack(self.settings)

    def prepare_stack(self) -> None:
        """Start ensuring the stack in a thread, while the command imports what it needs (the Temporal SDK
        takes a while); `ensure_stack` and `api` then wait for it."""
        if self._stack is None and self.starts_stack():
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

    def runs(self, *, submitting: bool = False) -> RunsClient:
        """The project's runs through Ferry's API as the logged-in user (docs/teams.md#runs): on the
        embedded stack, its API (started if need be) with this home's user's token. `submitting`: with the
        user's SSH key, installed for each job it submits (docs/attach.md)."""
        from cli.remote_runs import ApiSession, RemoteRuns

        keys = []
        if submitting:
            from cli.user_keys import public_key_line

            keys = [public_key_line(self.settings.home)]
        if self.through_api():
            return RemoteRuns(ApiSession(), self.project, keys)
        from cli.direct_runs import DirectRuns  # an operator's, with Temporal's address and no login

        return DirectRuns(self.store(), self.project, keys, self.api, self.connection)

    def secrets(self) -> ProjectSecrets:
        """The project's secrets, as the logged-in user or the operator (docs/teams.md#secrets)."""
        from cli.remote_runs import ApiSession
        from cli.secret_clients import RemoteSecrets, StoreSecrets

        if self.through_api():
            return RemoteSecrets(ApiSession(), self.project)
        return StoreSecrets(self.store(), self.project)

    def volumes(self) -> ProjectVolumes:
        """The project's named volumes, as the logged-in user or the operator (docs/teams.md#volumes)."""
        from cli.remote_runs import ApiSession
        from cli.volume_clients import RemoteVolumes, StoreVolumes

        if self.through_api():
            return RemoteVolumes(ApiSession(), self.project)
        return StoreVolumes(self.store(), self.project)

    def fleets(self) -> ProjectFleets:
        """The project's fleets, as the logged-in user or the operator (docs/teams.md#fleets)."""
        from cli.fleet_clients import RemoteFleets, StoreFleets
        from cli.remote_runs import ApiSession

        if self.through_api():
            return RemoteFleets(ApiSession(), self.project)

        async def fleet_api() -> FleetAPI:
            return (await self.api()).fleets()

        return StoreFleets(self.store(), self.project, fleet_api)

    def backends(self) -> ProjectBackends:
        """The project's backends, as the logged-in user or the operator (docs/teams.md#backends)."""
        from cli.backend_clients import RemoteBackends, StoreBackends
        from cli.remote_runs import ApiSession

        if self.through_api():
            return RemoteBackends(ApiSession(), self.project)
        return StoreBackends(self.store(), self.project)

    def find_run(self, store: RunReads, name: str) -> RunRecord:
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
    ensure_can_ask(yes=yes)
    import typer

    return typer.confirm(question, default=False, err=True)


def ensure_can_ask(*, yes: bool) -> None:
    """A clear error, before anything is done, where a confirmation will be needed and cannot be asked."""
    from cli.errors import USAGE_EXIT, CommandError

    if not yes and not sys.stdin.isatty():
        raise CommandError(
            "no terminal to ask for confirmation on: pass -y to go ahead without asking", USAGE_EXIT
        )
