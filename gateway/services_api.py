"""`/proxy/services/<project>/<run>/...`: a service's own HTTP and WebSocket API, on any of its replicas.

With `strip_prefix: true` (the default) the replica sees `/<rest>` (and the query string), else the whole
original path. `/proxy/services/<project>/<run>` without its slash is redirected (308) to the slash form.
A service with `auth: true` (the default) needs `Authorization: Bearer <a Ferry token>`; a refused request
never reaches a replica and is not counted for autoscaling, nor is one over the service's `rate_limits`
(429). Every other request is counted and forwarded (gateway.forwarding: held while the service has no
ready replica).
"""

from __future__ import annotations

from aiohttp import web

from core.services.replicas import SERVICES_PREFIX
from gateway.access import Access
from gateway.forwarding import Forwarder
from gateway.replies import plain_error
from gateway.rules import origin_form

SERVICE_ROUTE = SERVICES_PREFIX + "/{project}/{run_name}"


class ServicesApi:
    def __init__(self, access: Access, forwarder: Forwarder) -> None:
        self._access = access
        self._forwarder = forwarder

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_route("*", SERVICE_ROUTE, self.redirect_to_slash)
        router.add_route("*", SERVICE_ROUTE + "/{tail:.*}", self.handle)

    async def redirect_to_slash(self, request: web.Request) -> web.StreamResponse:
        path, mark, query = origin_form(request.raw_path)[0].partition("?")
        return web.Response(status=308, headers={"Location": f"{path}/{mark}{query}"})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        info = request.match_info
        return await self._serve(request, info["project"], info["run_name"], on_path=True)

    async def handle_on_host(self, request: web.Request, project: str, run_name: str) -> web.StreamResponse:
        """A request to `<run>.<domain>` (core.services.domains): the replica gets its path as it came,
        there being no prefix to take off (dstack's services on a gateway's domain)."""
        return await self._serve(request, project, run_name, on_path=False)

    async def _serve(
        self, request: web.Request, project: str, run_name: str, *, on_path: bool
    ) -> web.StreamResponse:
        service = self._access.table.services.get((project, run_name))
        if service is None:
            return plain_error(404, f"no running service {project}/{run_name} on this proxy (see `ferry ps`)")
        refused = await self._access.refusal(request, service, plain_error)
        if refused is not None:
            return refused
        forward_authorization = await self._access.forwards_authorization(request, service)
        target = origin_form(request.raw_path)[0]  # an absolute-form request's too (still percent-encoded)
        if on_path and service.settings.strip_prefix:
            rest = target.split("/", 5)[5]  # past /proxy/services/<project>/<run>/, query included
            return await self._forwarder.forward(
                request,
                service,
                "/" + rest,
                plain_error,
                stripped_prefix=service.path.rstrip("/"),
                forward_authorization=forward_authorization,
            )
        return await self._forwarder.forward(
            request, service, target, plain_error, forward_authorization=forward_authorization
        )
