"""What the fast path's connections and exchanges use of the front door
(gateway.fast_path.front_door.FrontDoor), as a protocol: the front door makes the connections, so they cannot
import it back."""

from __future__ import annotations

from typing import Any, Protocol

from gateway.balancer import Balancer
from gateway.directory import Directory
from gateway.fast_path.replica_pool import ReplicaPool
from gateway.options import GatewayOptions
from gateway.rate_limits import RateLimiter
from gateway.request_stats import RequestStats
from gateway.tokens import TokenChecker


class Door(Protocol):
    pool: ReplicaPool
    balancer: Balancer
    directory: Directory
    stats: RequestStats
    tokens: TokenChecker
    options: GatewayOptions
    rate_limiter: RateLimiter

    def opened(self, connection: Any) -> None: ...
    def closed(self, connection: Any) -> None: ...
    def head_started(self, connection: Any) -> None: ...
    def head_ended(self, connection: Any) -> None: ...
