"""Who may reach a service and what of their credentials it gets: what both APIs check before forwarding
(the forwarder counts the requests it lets through, gateway.forwarding)."""

from __future__ import annotations

import logging

from aiohttp import web

from core.teams.roles import Caller
from gateway.directory import Directory
from gateway.replies import ErrorReply
from gateway.routing_table import RoutingTable, Service
from gateway.rules import forwards_authorization, not_a_member, token_needed
from gateway.tokens import TokenChecker, bearer_token

log = logging.getLogger(__name__)


class Access:
    def __init__(self, directory: Directory, tokens: TokenChecker) -> None:
        self._directory = directory
        self._tokens = tokens

    @property
    def table(self) -> RoutingTable:
        return self._directory.table

    async def user(self, request: web.Request) -> Caller | None:
        """Whom the request's bearer token opens as (None: no token, or an unknown one); raises if the
        store cannot say."""
        return await self._tokens.user(bearer_token(request.headers.get("Authorization")))

    async def refusal(
        self, request: web.Request, service: Service, errors: ErrorReply
    ) -> web.Response | None:
        """None if the request may reach the service; else the answer to give: 401, 403 for a token of
        someone outside the service's project (docs/teams.md#services), or 503."""
        if not service.settings.auth:
            return None
        try:
            user = await self.user(request)
        except Exception:
            log.exception("could not look up a token")
            return errors(503, "could not check the token now (the store is unreachable); try again")
        if user is None:
            return errors(401, token_needed(service.project, service.run_name))
        if not user.sees(service.project):
            return errors(403, not_a_member(user.name, service.project, service.run_name))
        return None

    async def forwards_authorization(self, request: web.Request, service: Service) -> bool:
        """Whether the replica may get the request's Authorization header (gateway.rules)."""
        authorization = request.headers.get("Authorization")
        if authorization is None or service.settings.auth:
            return False
        return forwards_authorization(service.settings.auth, await self._tokens.is_ferry_token(authorization))
