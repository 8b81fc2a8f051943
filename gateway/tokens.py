"""Who a token belongs to: for services with `auth` (the default), whose bearer token must be that of a
member of the service's project (docs/teams.md#services); for the others, whose Authorization header is
forwarded only when it carries no Ferry token (gateway.rules.forwards_authorization).

A token is a user's Ferry token (`ferry token`) or a job's (docs/teams.md#a-jobs-token); the store keeps
its sha256 hex, and answers who it opens as and where (`Store.caller_for_token_hash`). Answers are cached in
memory by token: a known token for `token_ttl` (so a replaced token stops working within that time), an
unknown one for `unknown_token_ttl`. A miss is looked up in a thread, once however many requests carry
the same token meanwhile, so a cached token costs a dict lookup and no hashing.
"""

from __future__ import annotations

import asyncio
import time

from core.services.replicas import token_hash
from core.teams.roles import Caller
from gateway.options import GatewayOptions
from store.repository import Store

MAX_TOKEN_LENGTH = 512  # longer is no Ferry token: refused without a lookup
MAX_CACHED = 10_000  # tokens remembered at most (a flood of made-up tokens must not grow memory)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_LENGTH:
        return None
    return token


def carried_token(authorization: str | None) -> str | None:
    """What an Authorization header may carry a Ferry token as, whatever its scheme: its credentials
    (`Bearer <token>`, `Token <token>`, ...) or, with no scheme, the whole value."""
    if not authorization:
        return None
    value = authorization.strip()
    scheme, _, credentials = value.partition(" ")
    token = credentials.strip() or scheme
    return token if token and len(token) <= MAX_TOKEN_LENGTH else None


class TokenChecker:
    def __init__(self, store: Store, options: GatewayOptions) -> None:
        self._store = store
        self._options = options
        self._known: dict[str, tuple[Caller | None, float]] = {}  # token: (its caller or None, good until)
        self._looking_up: dict[str, asyncio.Task[Caller | None]] = {}

    def cached_user(self, token: str | None) -> tuple[bool, Caller | None]:
        """(True, the caller or None) when the answer is known without a lookup (no token, or a token in
        the cache); (False, None) when `user` has to look it up."""
        if token is None:
            return True, None
        cached = self._known.get(token)
        if cached is not None and cached[1] > time.monotonic():
            return True, cached[0]
        return False, None

    async def user(self, token: str | None) -> Caller | None:
        """Whom this token opens as: its user, their role and projects; None for no token, or not a known
        one. Raises if the store cannot say."""
        if token is None:
            return None
        cached = self._known.get(token)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        lookup = self._looking_up.get(token)
        if lookup is None:
            # A task of its own: a cancelled request (its client gone) must not cancel the others' answer.
            lookup = asyncio.create_task(self._look_up(token))
            lookup.add_done_callback(_retrieve_exception)
            self._looking_up[token] = lookup
        return await asyncio.shield(lookup)

    async def is_ferry_token(self, authorization: str | None) -> bool | None:
        """Whether the header carries a user's Ferry token (carried_token); None if the store cannot say."""
        try:
            return await self.user(carried_token(authorization)) is not None
        except Exception:
            return None

    async def _look_up(self, token: str) -> Caller | None:
        try:
            user = await asyncio.to_thread(self._store.caller_for_token_hash, token_hash(token))
        finally:
            del self._looking_up[token]
        ttl = self._options.token_ttl if user is not None else self._options.unknown_token_ttl
        if len(self._known) >= MAX_CACHED:
            self._known.clear()
        self._known[token] = (user, time.monotonic() + ttl)
        return user


def _retrieve_exception(task: asyncio.Task[Caller | None]) -> None:
    if not task.cancelled():
        task.exception()  # raised to the requests awaiting it; none may be left
