"""`ferry token` (docs/teams.md#your-token): the token the user's CLI calls Ferry with, the one a service
with `auth` admits for their project's members (docs/services.md). Logged in, it is the login's, and
`--rotate` asks the API for a new one; an operator's CLI or the embedded stack's keeps the home's user's
token in FERRY_HOME and in the store (cli.services.user_token)."""

from __future__ import annotations

import json
import os
from urllib.parse import quote

import typer

from cli.api_client import call
from cli.login_file import default_user, kept_login, login_path, save_login

STALE_VARIABLE = (
    "FERRY_TOKEN still holds the old token, which no longer works: set FERRY_TOKEN to the new one"
)


def print_token(*, rotate: bool) -> None:
    """The token on stdout; rotated first with `rotate` (the old one stops working at once)."""
    login = kept_login()
    if login is None:
        typer.echo(_home_token(rotate=rotate))
        return
    url, token = login
    if not rotate:
        typer.echo(token)
        return
    me = call("GET", "/api/me", url=url, token=token)
    issued = call("POST", f"/api/users/{quote(me['name'], safe='')}/token", url=url, token=token)
    fresh = str(issued["token"])
    typer.echo(fresh)
    if os.environ.get("FERRY_TOKEN"):  # the login's token came from the variable (cli.login_file)
        typer.echo(STALE_VARIABLE, err=True)
    else:  # from `ferry login`'s file: kept there, with the file's own URL
        kept = json.loads(login_path().read_text())
        save_login(str(kept.get("url") or url), fresh)


def _home_token(*, rotate: bool) -> str:
    """The home's user's token, kept in FERRY_HOME and known to the store (the operator's, the stack's)."""
    from cli.context import Context
    from cli.services import TOKEN_FILE, user_token

    ctx = Context.from_env()
    return user_token(ctx.store(), ctx.settings.home / TOKEN_FILE, default_user(), rotate=rotate)
