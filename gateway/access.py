"""Who may reach a service, and the count of those who did: what both APIs check before forwarding."""

from __future__ import annotations

import logging

from aiohttp import web

from gateway.directory import Directory
from gateway.replies import TOKEN_NEEDED, ErrorReply
from gateway.request_stats import RequestStats
from gateway.routing_table import RoutingTable, Service
from gateway.tokens import TokenChecker

log = logging.getLogger(__name__)


class Access:
    def __init__(self, directory: Directory, tokens: TokenChecker, stats: RequestStats) -> None:
        self._directory = directory
        self._tokens = tokens
        self._stats = stats

    @property
    def table(self) -> RoutingTable:
        return self._directory.table

    async def user(self, request: web.Request) -> str | None:
        """The user whose token the request carries (None: no token, or an unknown one); raises if the
        store cannot say."""
        return await self._tokens.user(request.headers.get("Authorization"))

    async def refusal(
        self, request: web.Request, service: Service, errors: ErrorReply
    ) -> web.Response | None:
        """None if the request may reach the service; else the answer to give (401, or 503)."""
        if not service.settings.auth:
            return None
        try:
            user = await self.user(request)
        except Exception:
            log.exception("could not look up a token")
            return errors(503, "could not check the token now (the store is unreachable); try again")
        if user is None:
            return errors(401, f"{service.project}/{service.run_name} needs {TOKEN_NEEDED}")
        return None

    def count(self, service: Service) -> None:
        """Counts an accepted request for the autoscaler."""
        self._stats.count(service.run_id)
