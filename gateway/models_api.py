"""`/proxy/models/<project>/v1/...`: an OpenAI-compatible API over the project's services that declare
a `model` (as dstack's), so that an OpenAI client with `base_url=<proxy>/proxy/models/<project>/v1` and
`api_key=<Ferry token>` reaches any of them by model name.

- `GET .../v1/models` lists the models: all of them for a valid token, those of public (`auth: false`)
  services without one; an invalid token is refused (401).
- `POST .../v1/chat/completions` and `.../v1/completions` read the body's `model`, find the service that
  serves it, check its `auth`, and forward the request to `<model.prefix>/chat/completions` (or
  `/completions`) on a ready replica, streamed like any other request (gateway.forwarding).

Errors are OpenAI-style JSON (`{"error": {"message": ...}}`), which OpenAI clients show.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from core.services.replicas import MODELS_PREFIX
from gateway.access import Access
from gateway.forwarding import Forwarder
from gateway.replies import openai_error, openai_reply
from gateway.routing_table import Service
from gateway.rules import TOKEN_NOT_VALID

BASE_ROUTE = MODELS_PREFIX + "/{project}/v1"


class ModelsApi:
    def __init__(self, access: Access, forwarder: Forwarder) -> None:
        self._access = access
        self._forwarder = forwarder

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get(BASE_ROUTE + "/models", self.list_models)
        router.add_get(BASE_ROUTE + "/models/{model:.+}", self.get_model)
        router.add_post(BASE_ROUTE + "/chat/completions", self.chat_completions)
        router.add_post(BASE_ROUTE + "/completions", self.completions)

    async def handle_on_host(self, request: web.Request, project: str) -> web.StreamResponse:
        """A request to `gateway.<domain>` (core.services.domains): the same API at `/v1/...`."""
        path, method = request.path, request.method
        if path == "/v1/models" and method == "GET":
            return await self._list_models(request, project)
        if path.startswith("/v1/models/") and len(path) > len("/v1/models/") and method == "GET":
            return await self._get_model(request, project, path.removeprefix("/v1/models/"))
        if path in ("/v1/chat/completions", "/v1/completions") and method == "POST":
            return await self._forward(request, project, path.removeprefix("/v1/"))
        return openai_error(
            404,
            f"no {method} {path} here: the models API is at /v1/models, "
            "/v1/chat/completions and /v1/completions",
        )

    async def list_models(self, request: web.Request) -> web.Response:
        return await self._list_models(request, request.match_info["project"])

    async def _list_models(self, request: web.Request, project: str) -> web.Response:
        visible = await self._visible(request, project)
        if isinstance(visible, web.Response):
            return visible
        return web.json_response({"object": "list", "data": [_model_entry(s) for s in visible]})

    async def get_model(self, request: web.Request) -> web.Response:
        return await self._get_model(request, request.match_info["project"], request.match_info["model"])

    async def _get_model(self, request: web.Request, project: str, name: str) -> web.Response:
        visible = await self._visible(request, project)
        if isinstance(visible, web.Response):
            return visible
        for service in visible:
            if _model_name(service) == name:
                return web.json_response(_model_entry(service))
        return _unknown_model(project, name)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._forward(request, request.match_info["project"], "chat/completions")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._forward(request, request.match_info["project"], "completions")

    async def _forward(self, request: web.Request, project: str, endpoint: str) -> web.StreamResponse:
        try:
            body = await request.read()
            payload: Any = json.loads(body)
        except web.HTTPRequestEntityTooLarge as err:
            return openai_error(413, err.text or "the request body is too large")
        except ValueError:
            return openai_error(400, "the request body is not JSON")
        name = payload.get("model") if isinstance(payload, dict) else None
        if not isinstance(name, str) or not name:
            return openai_error(400, "the request names no `model`", param="model")
        service = self._access.table.models.get((project, name))
        if service is None:
            return _unknown_model(project, name)
        refused = await self._access.refusal(request, service, openai_reply)
        if refused is not None:
            return refused
        forward_authorization = await self._access.forwards_authorization(request, service)
        model = service.settings.model
        assert model is not None
        path = f"{model.prefix}/{endpoint}"
        if request.query_string:
            path += "?" + request.raw_path.partition("?")[2]
        return await self._forwarder.forward(
            request, service, path, openai_reply, body=body, forward_authorization=forward_authorization
        )

    async def _visible(self, request: web.Request, project: str) -> list[Service] | web.Response:
        """The project's model services this request may see, or the answer that it may see none."""
        services = self._access.table.project_models(project)
        if "Authorization" not in request.headers:
            return [s for s in services if not s.settings.auth]
        try:
            user = await self._access.user(request)
        except Exception:
            return openai_error(503, "could not check the token now (the store is unreachable); try again")
        if user is None:
            return openai_error(401, TOKEN_NOT_VALID)
        # Another project's models do not exist for this token (docs/teams.md#services).
        return services if user.sees(project) else [s for s in services if not s.settings.auth]


def _model_name(service: Service) -> str:
    assert service.settings.model is not None
    return service.settings.model.name


def _model_entry(service: Service) -> dict[str, Any]:
    return {
        "id": _model_name(service),
        "object": "model",
        "created": service.created,
        "owned_by": service.project,
    }


def _unknown_model(project: str, name: str) -> web.Response:
    return openai_error(
        404,
        f"the model {name!r} is not served in project {project} "
        f"(GET {MODELS_PREFIX}/{project}/v1/models lists those that are)",
        code="model_not_found",
        param="model",
    )
