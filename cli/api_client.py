"""How the CLI reaches Ferry's API (docs/teams.md#logging-in): the server's URL and the user's token, from
FERRY_API_URL and FERRY_TOKEN, or the file `ferry login` keeps (FERRY_HOME/login.json, read by its owner
only), or else the embedded stack's API with this user's token; every refusal becomes the command's one
line and its exit code (cli/exit_codes.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx

from cli import exit_codes
from cli.errors import CommandError
from core.settings import Settings

LOGIN_FILE = "login.json"
TIMEOUT = 30.0
NOT_LOGGED_IN = "not logged in: run `ferry login URL` (or set FERRY_API_URL and FERRY_TOKEN)"
_EXIT_CODES = {401: exit_codes.DENIED, 403: exit_codes.DENIED, 404: exit_codes.NOT_FOUND}


def login_path(settings: Settings | None = None) -> Path:
    return (settings or Settings.from_env()).home / LOGIN_FILE


def save_login(url: str, token: str, settings: Settings | None = None) -> Path:
    from embedded.processes import private_opener

    path = login_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path, "w", opener=private_opener) as out:
        json.dump({"url": url.rstrip("/"), "token": token}, out)
        out.write("\n")
    return path


def login() -> tuple[str, str]:
    """The API's URL and the token to call it with; DENIED when there is neither a login nor the variables."""
    url, token = os.environ.get("FERRY_API_URL"), os.environ.get("FERRY_TOKEN")
    if not (url and token):
        try:
            kept = json.loads(login_path().read_text())
        except (OSError, ValueError):
            kept = {}
        url, token = url or kept.get("url"), token or kept.get("token")
    if not (url and token):
        embedded = _embedded_login()
        if embedded is None:
            raise CommandError(NOT_LOGGED_IN, exit_codes.DENIED)
        return embedded
    return url.rstrip("/"), token


def _embedded_login() -> tuple[str, str] | None:
    """Without a login, on the embedded stack (no FERRY_TEMPORAL_ADDRESS): its API and this user's token
    (`ferry token`'s); the store's first user is its admin (docs/teams.md#the-first-user)."""
    from cli.api import default_user
    from cli.context import Context
    from cli.services import TOKEN_FILE, user_token
    from embedded.stack import Stack

    ctx = Context.from_env()
    if ctx.settings.temporal_address is not None:
        return None
    status = Stack(ctx.settings.home).start()
    url = next((p.address for p in status.processes if p.name == "api"), None)
    if url is None:
        return None
    return url, user_token(ctx.store(), ctx.settings.home / TOKEN_FILE, default_user())


def call(
    method: str, path: str, json_body: Any = None, *, url: str | None = None, token: str | None = None
) -> Any:
    """The API's answer to one call, as JSON (None for 204); a refusal raises CommandError with its line."""
    if url is None or token is None:
        url, token = login()
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT) as client:
            answer = client.request(method, path, json=json_body)
    except httpx.TransportError as err:
        raise CommandError(f"cannot reach Ferry's API at {url}: {err}", exit_codes.UNREACHABLE) from None
    if answer.status_code == 204:
        return None
    if answer.status_code < 300:
        return answer.json()
    try:
        detail = str(answer.json()["detail"])
    except (ValueError, KeyError, TypeError):
        detail = f"{answer.status_code} {answer.reason_phrase}"
    raise CommandError(detail, _EXIT_CODES.get(answer.status_code, exit_codes.USAGE))
