"""The codec endpoint: Temporal's codec server protocol, so that the Web UI shows Ferry's sealed payloads
(worker/codec.py) to whoever holds the key (docs/secrets.md#the-web-ui).

`POST <endpoint>/decode` and `/encode` take and answer `{"payloads": [...]}` (Payloads as protobuf JSON).
The services proxy serves it (gateway/app.py) at `/codec/<token>`: the token is derived from the key
(store.keys.Keys.derived), so the URL is a capability that only a holder of the key can make, and
`ferry secret codec` prints it. Browsers may call it from the origins of a loopback address (the
embedded stack's UI) and from those FERRY_CODEC_ORIGINS lists (comma-separated, e.g. a server's UI).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable
from urllib.parse import urlsplit

from aiohttp import web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from store.keys import Keys, SealError, process_keys
from worker.codec import EncryptionCodec

CODEC_PATH = "/codec"
TOKEN_PURPOSE = b"ferry codec endpoint"
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"


def codec_endpoint(base_url: str, keys: Keys) -> str:
    """The URL to give the Web UI, on the proxy at `base_url`."""
    return f"{base_url.rstrip('/')}{CODEC_PATH}/{keys.derived(TOKEN_PURPOSE)[0]}"


class CodecEndpoint:
    def __init__(self, keys: Callable[[], Keys] = process_keys, origins: list[str] | None = None) -> None:
        self._keys = keys  # read at the first request: a proxy without keys still serves its services
        listed = os.environ.get("FERRY_CODEC_ORIGINS", "") if origins is None else ",".join(origins)
        self._origins = {origin.strip().rstrip("/") for origin in listed.split(",") if origin.strip()}

    def add_routes(self, router: web.UrlDispatcher) -> None:
        path = CODEC_PATH + "/{token}/{action:encode|decode}"
        router.add_post(path, self._handle)
        router.add_route("OPTIONS", path, self._preflight)

    def _allowed_origin(self, request: web.Request) -> str | None:
        origin = request.headers.get("Origin")
        if origin is None:
            return None
        if origin in self._origins or urlsplit(origin).hostname in _LOOPBACK_HOSTS:
            return origin
        return None

    def _cors(self, request: web.Request) -> dict[str, str]:
        origin = self._allowed_origin(request)
        if origin is None:
            return {}
        return {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Credentials": "true",
            "Access-Control-Allow-Methods": "POST, OPTIONS",
            "Access-Control-Allow-Headers": _ALLOWED_HEADERS,
            "Vary": "Origin",
        }

    async def _preflight(self, request: web.Request) -> web.Response:
        return web.Response(status=204, headers=self._cors(request))

    async def _handle(self, request: web.Request) -> web.Response:
        headers = self._cors(request)
        try:
            keys = self._keys()
        except (SealError, OSError) as err:
            return web.json_response({"message": str(err)}, status=503, headers=headers)
        presented = request.match_info["token"].encode()
        if not any(hmac.compare_digest(presented, token.encode()) for token in keys.derived(TOKEN_PURPOSE)):
            raise web.HTTPNotFound()
        try:
            payloads = json_format.Parse(await request.text(), Payloads())
        except json_format.ParseError as err:
            return web.json_response({"message": f"not Payloads: {err}"}, status=400, headers=headers)
        codec = EncryptionCodec(keys)
        action = codec.decode if request.match_info["action"] == "decode" else codec.encode
        try:
            answer = Payloads(payloads=await action(payloads.payloads))
        except SealError as err:
            return web.json_response({"message": str(err)}, status=400, headers=headers)
        return web.Response(
            text=json_format.MessageToJson(answer), content_type="application/json", headers=headers
        )
