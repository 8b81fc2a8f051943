"""The API's Temporal client and FerryAPI (docs/teams.md#one-way-in): the API, with the workers, is the
only Temporal client and the only holder of the payload codec's key; a user's command reaches neither.
FerryError, Ferry's one line for what a user can fix, becomes that line with its status and the exit code
the CLI gives it (`X-Ferry-Exit-Code`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import Request
from temporalio.client import Client

from api.auth import Refused, store_of
from api.project_runs import ProjectRuns
from cli import exit_codes
from cli.api_client import CODE_NEEDED, EXIT_CODE
from cli.errors import CodeMissing, FerryError
from core.configuration.notifications import private_webhooks_allowed
from core.settings import Settings
from core.temporal_connection import ConnectionSettingsError

_STATUS = {exit_codes.NOT_FOUND: 404, exit_codes.FAILED: 409, exit_codes.USAGE: 400}
_LOCK = asyncio.Lock()


async def temporal_client(request: Request) -> Client:
    """The process's one client, connected on first use (the stack's Temporal may start after the API)."""
    state = request.app.state
    if getattr(state, "client", None) is None:
        async with _LOCK:
            if getattr(state, "client", None) is None:
                from worker.temporal import connect_to

                try:
                    connection = Settings.from_env().temporal_connection()
                except ConnectionSettingsError as err:
                    raise Refused(503, f"Ferry's API cannot reach Temporal: {err}") from None
                try:
                    state.client = await connect_to(connection)
                except (RuntimeError, ConnectionSettingsError) as err:
                    raise Refused(
                        503, f"Ferry's API cannot reach Temporal at {connection.address}: {err}"
                    ) from None
    client: Client = state.client
    return client


async def project_runs(request: Request, project: str) -> ProjectRuns:
    allowed = private_webhooks_allowed(Settings.from_env().webhooks_allow_private, request.app.state.embedded)
    client = await temporal_client(request)
    return ProjectRuns(store_of(request), client, project, allowed, request.app.state.local_starts)


@contextmanager
def one_line_errors() -> Iterator[None]:
    """A FerryError raised within: its line, with the status and exit code its kind has."""
    try:
        yield
    except CodeMissing as err:  # the client sends the code, then the submission again (cli/remote_runs.py)
        raise Refused(409, str(err), {EXIT_CODE: str(err.exit_code), CODE_NEEDED: "1"}) from None
    except FerryError as err:
        status = _STATUS.get(err.exit_code, 400)
        raise Refused(status, str(err), {EXIT_CODE: str(err.exit_code)}) from None
