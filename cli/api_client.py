"""How the CLI reaches Ferry's API (docs/teams.md#logging-in): the server's URL and the user's token, from
FERRY_API_URL and FERRY_TOKEN, or the file `ferry login` keeps (FERRY_HOME/login.json, read by its owner
only), or else the embedded stack's API with this user's token; every refusal becomes the command's one
line and its exit code (cli/exit_codes.py)."""

from __future__ import annotations

from typing import Any

import httpx

from cli import exit_codes
from cli.errors import CommandError
from cli.login_file import default_user, kept_login

TIMEOUT = 30.0
NOT_LOGGED_IN = "not logged in: run `ferry login URL` (or set FERRY_API_URL and FERRY_TOKEN)"
_EXIT_CODES = {
    401: exit_codes.DENIED,
    403: exit_codes.DENIED,
    404: exit_codes.NOT_FOUND,
    503: exit_codes.UNREACHABLE,
}
EXIT_CODE = "X-Ferry-Exit-Code"  # api/temporal.py: the exit code of a FerryError's kind
CODE_NEEDED = "X-Ferry-Code-Needed"  # a submission's 409 when the store lacks its code: send it, then again


def login() -> tuple[str, str]:
    """The API's URL and the token to call it with; DENIED when there is neither a login nor the variables."""
    kept = kept_login()
    if kept is None:
        kept = _embedded_login()
    if kept is None:
        raise CommandError(NOT_LOGGED_IN, exit_codes.DENIED)
    return kept


def _embedded_login() -> tuple[str, str] | None:
    """Without a login, on the embedded stack (no FERRY_TEMPORAL_ADDRESS): its API and this user's token
    (`ferry token`'s); the store's first user is its admin (docs/teams.md#the-first-user)."""
    from cli.home_store import open_home_store
    from cli.services import TOKEN_FILE, user_token
    from core.settings import Settings
    from embedded.stack import Stack

    settings = Settings.from_env()
    if settings.temporal_address is not None:
        return None
    status = Stack(settings.home).start()
    url = next((p.address for p in status.processes if p.name == "api"), None)
    if url is None:
        return None
    return url, user_token(open_home_store(settings), settings.home / TOKEN_FILE, default_user())


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
    raise refusal(answer)


def refusal(answer: httpx.Response) -> CommandError:
    """The API's refusal as the command's one line, with the exit code it says (X-Ferry-Exit-Code) or its
    status's."""
    try:
        detail = str(answer.json()["detail"])
    except (ValueError, KeyError, TypeError):
        detail = f"{answer.status_code} {answer.reason_phrase}"
    said = answer.headers.get(EXIT_CODE, "")
    code = int(said) if said.isdigit() else _EXIT_CODES.get(answer.status_code, exit_codes.USAGE)
    return CommandError(detail, code)
