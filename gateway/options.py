"""The proxy's timings, in one place: the defaults suit production, and tests shorten them."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.rules import HEAD_TIMEOUT, MAX_SLOW_HEADS

# How long a request for a running service with no ready replica (starting, or scaled to zero) waits for
# one before it is answered 503. Long enough for a replica to start from zero (the held request is counted
# at once, so the autoscaler sees the demand), short of most clients' own timeouts.
DEFAULT_HOLD_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class GatewayOptions:
    refresh_interval: float = 0.1  # how often the routing table is re-read from the store
    heartbeat_interval: float = 1.0  # gateway_seen; a drain stops waiting for a proxy silent for 5 s
    flush_interval: float = 1.0  # request counts written to the store (at once for a held request)
    prune_interval: float = 600.0  # how often request counts older than `requests_kept_for` are deleted
    requests_kept_for: float = 3600.0
    hold_timeout: float = DEFAULT_HOLD_TIMEOUT
    token_ttl: float = 60.0  # a known token is looked up again after this long (a replaced token expires)
    unknown_token_ttl: float = 1.0  # an unknown token is looked up again after this long
    connect_timeout: float = 10.0  # to a replica; answers themselves may stream for as long as they like
    shutdown_timeout: float = 5.0  # on SIGTERM, requests in flight get this long to finish
    fast_path: bool = (
        True  # plain requests on gateway.fast_path.connection; off: the aiohttp app serves them all
    )
    head_timeout: float = HEAD_TIMEOUT  # a request head's first byte to its blank line (gateway.rules)
    max_slow_heads: int = MAX_SLOW_HEADS  # connections whose head is still coming, at most
    # Proxy processes sharing the port (gateway.workers): each enforces 1/workers of every rate limit
    # (gateway.rate_limits.worker_share, docs/services.md#rate-limits).
    workers: int = 1
    # The proxy's domain (docs/deployment.md#https-on-a-domain): requests whose Host is under it are
    # routed by their host (core.services.domains), by the app; None: by their path alone.
    domain: str | None = None
