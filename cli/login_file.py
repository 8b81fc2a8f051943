"""The login the CLI keeps (docs/teams.md#logging-in): FERRY_HOME/login.json, read by its owner only, or
FERRY_API_URL and FERRY_TOKEN in its place."""

from __future__ import annotations

import json
import os
from pathlib import Path

from core.settings import Settings

LOGIN_FILE = "login.json"


def default_user() -> str:
    """Who the CLI acts as without a login: FERRY_USER, else the system's user (docs/teams.md#one-way-in)."""
    return os.environ.get("FERRY_USER") or os.environ.get("USER") or "ferry"


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


def kept_login() -> tuple[str, str] | None:
    """The URL and token from FERRY_API_URL and FERRY_TOKEN, or else from `ferry login`'s file; None."""
    url, token = os.environ.get("FERRY_API_URL"), os.environ.get("FERRY_TOKEN")
    if not (url and token):
        try:
            kept = json.loads(login_path().read_text())
        except (OSError, ValueError):
            kept = {}
        url, token = url or kept.get("url"), token or kept.get("token")
    return (url.rstrip("/"), token) if url and token else None
