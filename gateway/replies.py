"""The proxy's own answers: plain text for `/proxy/services/` (read by people and curl), OpenAI-style JSON
for `/proxy/models/` (read by OpenAI clients, which show `error.message`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from aiohttp import web

# An answer of the proxy's own: (status, one-line message) -> response.
ErrorReply = Callable[[int, str], web.Response]

_BEARER = {"WWW-Authenticate": "Bearer"}

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",  # OpenAI's own type for its 429s; clients back off on it
    502: "server_error",
    503: "server_error",
}


def plain_error(status: int, message: str) -> web.Response:
    headers: Mapping[str, str] = _BEARER if status == 401 else {}
    return web.Response(status=status, text=message + "\n", headers=headers)


def openai_error(
    status: int, message: str, *, code: str | None = None, param: str | None = None
) -> web.Response:
    headers: Mapping[str, str] = _BEARER if status == 401 else {}
    error = {
        "message": message,
        "type": _OPENAI_TYPES.get(status, "server_error"),
        "param": param,
        "code": code,
    }
    return web.Response(
        status=status, text=json.dumps({"error": error}), content_type="application/json", headers=headers
    )


def openai_reply(status: int, message: str) -> web.Response:
    """`openai_error` as an ErrorReply (no code, no param)."""
    return openai_error(status, message)
