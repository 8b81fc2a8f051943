"""Requests by Host under the proxy's domain (docs/deployment.md#https-on-a-domain): an aiohttp
middleware that sends `<run>.<domain>` to the service and `gateway.<domain>` to the project's models
(the rule: core.services.domains), whatever their path; any other Host falls to the path routes
(/proxy/services/..., /proxy/models/..., /healthz), which keep working on every listener.

The fast path leaves requests under the domain to the app (gateway.fast_path.routing.route).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from core.services.domains import ModelsHost, ServiceHost, route_host
from gateway.models_api import ModelsApi
from gateway.replies import plain_error
from gateway.services_api import ServicesApi

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def host_routing(
    domain: str, services: ServicesApi, models: ModelsApi
) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def by_host(request: web.Request, handler: Handler) -> web.StreamResponse:
        found = route_host(request.headers.get("Host"), domain)
        if found is None:
            return await handler(request)
        if isinstance(found, ServiceHost):
            return await services.handle_on_host(request, found.project, found.run_name)
        if isinstance(found, ModelsHost):
            return await models.handle_on_host(request, found.project)
        return plain_error(
            404,
            f"no service at {found.host}: services are at <run>.{domain} (the default project's) or "
            f"<run>.<project>.{domain}, models at gateway.{domain} (see `ferry ps`)",
        )

    return by_host
